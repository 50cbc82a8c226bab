// heed/error.h — the one exception type heed throws, and the checks that build it.
//
// Invariant: every user-facing failure (bad shape, dtype, device, index, file)
// is reported as heed::Error whose message starts with "heed::<op>: " and says
// what was expected. Internal invariants use HEED_INTERNAL_ASSERT, which also
// throws (never aborts) so a bug surfaces as a catchable error.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace heed {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws heed::Error("heed::<op>: <formatted message>").
template <typename... Args>
[[noreturn]] void fail(std::string_view op, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("heed::{}: {}", op, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace heed

// HEED_CHECK(cond, "op", "fmt", args...): throws heed::Error naming the op when cond is false.
#define HEED_CHECK(cond, op, ...)    \
  do {                               \
    if (!(cond)) [[unlikely]]        \
      ::heed::fail(op, __VA_ARGS__); \
  } while (0)

#define HEED_INTERNAL_ASSERT(cond)                                                                                   \
  do {                                                                                                               \
    if (!(cond)) [[unlikely]]                                                                                        \
      ::heed::fail("internal", "assertion '{}' failed at {}:{} (this is a bug in heed)", #cond, __FILE__, __LINE__); \
  } while (0)
