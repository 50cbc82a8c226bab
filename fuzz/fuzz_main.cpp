// fuzz/fuzz_main.cpp — the libFuzzer harness of one target, chosen at compile time with
// -DHEED_FUZZ_TARGET=<name> (see fuzz/CMakeLists.txt). heed::Error is handled inside the
// target; anything else escaping aborts, which libFuzzer reports as a crash.
#include <cstddef>
#include <cstdint>

#include <heed/parallel.h>

#include "fuzz_targets.h"

#ifndef HEED_FUZZ_TARGET
#error "compile with -DHEED_FUZZ_TARGET=<safetensors|json|checkpoint|cli>"
#endif

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  heed::set_num_threads(1);  // inputs are small: one thread runs them fastest
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  heed::fuzz::HEED_FUZZ_TARGET(data, size);
  return 0;
}
