// tests/test_util.h — small checks on heed::Error shared by the test files (one copy instead
// of one per file).
//
// Invariants: CHECK_HEED_ERROR(expr, op) evaluates `expr` twice (once for the type check,
// once for the message) and fails unless it throws heed::Error whose message starts with
// "heed::<op>:". Nothing here changes global state.
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
