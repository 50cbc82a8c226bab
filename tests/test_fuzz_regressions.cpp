// tests/test_fuzz_regressions.cpp — replays every input the fuzzers ever found
// (fuzz/regressions/<target>/*) and the seed corpus (fuzz/corpus/<target>/*) through the same
// entry points the libFuzzer harnesses call (fuzz/fuzz_targets.h). Each must be accepted or
// rejected with heed::Error; under the sanitizer build any memory error or UB is reported too.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_targets.h"

namespace {

std::vector<std::filesystem::path> files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Replays every file of fuzz/<folder>/<target>/ and returns how many there were; with
// `name_each`, each file is named in the output as it is replayed.
size_t replay(const std::string& folder, bool name_each) {
  const std::filesystem::path root = std::filesystem::path(HEED_SOURCE_DIR) / "fuzz" / folder;
  REQUIRE(std::filesystem::is_directory(root));
  size_t replayed = 0;
  for (const heed::fuzz::Target& target : heed::fuzz::targets()) {
    for (const std::filesystem::path& file : files_in(root / target.name)) {
      CAPTURE(file.string());
      const std::string bytes = heed::io::read_file(file.string());
      if (name_each) {
        const std::string replaying =
            "replaying " + (std::filesystem::path("fuzz") / folder / target.name / file.filename()).string();
        MESSAGE(replaying);
      }
      CHECK_NOTHROW(target.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      ++replayed;
    }
  }
  const std::string summary = "replayed " + std::to_string(replayed) + " inputs from fuzz/" + folder;
  MESSAGE(summary);
  return replayed;
}

}  // namespace

TEST_CASE("every fuzz target has a seed corpus and it replays cleanly") {
  for (const heed::fuzz::Target& target : heed::fuzz::targets()) {
    CAPTURE(target.name);
    CHECK_FALSE(files_in(std::filesystem::path(HEED_SOURCE_DIR) / "fuzz" / "corpus" / target.name).empty());
  }
  CHECK(replay("corpus", false) > 0);
}

TEST_CASE("every input the fuzzers found replays cleanly") {
  // At least the JSON findings of issue 16 (translate config, scaler and scheduler states).
  CHECK(replay("regressions", true) >= 7);
}

TEST_CASE("the fuzz targets reject garbage with heed::Error and catch broken properties") {
  // Empty and one-byte inputs go through every target.
  const uint8_t byte = 0x7b;
  for (const heed::fuzz::Target& target : heed::fuzz::targets()) {
    CAPTURE(target.name);
    CHECK_NOTHROW(target.run(nullptr, 0));
    CHECK_NOTHROW(target.run(&byte, 1));
  }
  // The JSON target's depth limit: a very deep document is rejected, not a stack overflow.
  const std::string deep(200000, '[');
  CHECK_NOTHROW(heed::fuzz::json(reinterpret_cast<const uint8_t*>(deep.data()), deep.size()));
}
