// fuzz/make_seed_corpus.cpp — writes the seed corpus of every fuzz target (see
// fuzz_targets.h): valid inputs that reach deep into each reader, which libFuzzer mutates.
#include <cstdio>
#include <exception>

#include "fuzz_targets.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  try {
    heed::fuzz::write_seed_corpus(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", argv[0], e.what());
    return 1;
  }
  return 0;
}
