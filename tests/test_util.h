// tests/test_util.h — small helpers for checking heed::Error shared by the test files (one
// copy instead of one per file).
//
// Invariants: CHECK_HEED_ERROR(expr, op) evaluates `expr` twice (once for the type check,
// once for the message) and fails unless it throws heed::Error whose message starts with
// "heed::<op>:"; error_message(f) is the message of the heed::Error `f` throws ("" when it
// throws nothing; any other exception escapes and fails the test case); contains is a plain
// substring test. Nothing here changes global state.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include <heed/heed.h>

// Runs `expr`, which must throw heed::Error whose message starts with "heed::<op>:".
#define CHECK_HEED_ERROR(expr, op)                                                   \
  do {                                                                               \
    CHECK_THROWS_AS((void)(expr), heed::Error);                                      \
    std::string message_;                                                            \
    try {                                                                            \
      (void)(expr);                                                                  \
    } catch (const heed::Error& e) {                                                 \
      message_ = e.what();                                                           \
    }                                                                                \
    CHECK_MESSAGE(message_.rfind(std::string("heed::") + (op) + ":", 0) == 0,        \
                  "expected an error from heed::" << (op) << ", got: " << message_); \
  } while (0)

// The message of the heed::Error `f` throws, or "" if it throws nothing.
template <typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const heed::Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
