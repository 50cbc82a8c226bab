// fuzz/fuzz_targets.h — the entry points shared by the libFuzzer harnesses (fuzz_main.cpp)
// and the regression test that replays every input ever found (tests/test_fuzz_regressions.cpp).
//
// Invariants: a target takes any bytes; it returns normally when heed accepted the input or
// rejected it with heed::Error (the promise), and lets anything else escape: another exception
// type, or a FuzzPropertyViolation when an accepted input broke a property (e.g. a safetensors
// file that does not round-trip). Under libFuzzer an escaping exception aborts (a finding);
// under doctest it fails the test case. Sanitizers report memory and UB errors on their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace heed::fuzz {

struct FuzzPropertyViolation : std::logic_error {
  using std::logic_error::logic_error;
};

// heed::io::parse_safetensors; accepted files are serialized again and must parse to the same
// tensors (names, dtypes, shapes, bytes) and metadata.
void safetensors(const uint8_t* data, size_t size);
// heed::io::parse_json, then the readers that take JSON from files and checkpoints: optimizer
// scalars, scheduler state, the translate example's model config. Accepted documents must
// dump and parse back to an equal value.
void json(const uint8_t* data, size_t size);
// heed::io::parse_checkpoint into a tiny TransformerLM with AdamW and a WarmupCosineLR (the
// path of load_checkpoint after the file is read); an accepted checkpoint leaves finite
// parameters of the model's shapes.
void checkpoint(const uint8_t* data, size_t size);
// heed::cli::ArgParser with the examples' and tools' kinds of options (flags, ranged ints and
// doubles, strings with choices, positionals, subcommands), argv split at NUL bytes; then
// parse_device and parse_attention_scale on the parsed strings. Parsed values must respect
// their declared ranges and choices; errors must come with a message.
void cli(const uint8_t* data, size_t size);

struct Target {
  const char* name;
  void (*run)(const uint8_t* data, size_t size);
};
// Every target, by the name of its corpus and regression folders.
const std::vector<Target>& targets();

// Writes the seed corpus: <directory>/<target>/<seed name> (make_seed_corpus.cpp).
void write_seed_corpus(const std::string& directory);

}  // namespace heed::fuzz
