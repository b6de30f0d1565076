// Catch2 v2 / v3 compatibility for the fused-ops C++ tests.
//
//   FUSED_CONTAINS(s)            a string matcher "contains s" (v3 ContainsSubstring, v2 Contains)
//   REQUIRE_C10_ERROR(expr, m)   expr throws a c10::Error whose message matches the matcher m
//   FUSED_SKIP(reason)           skips the rest of the test case with a printed reason
//                                (v3.3+: SKIP; older: a printed line, WARN and return)
#pragma once

// c10's logging header defines a glog-style CHECK(cond) that aborts the process. Include it
// first (it is include-guarded, so later torch headers do not define CHECK again) and drop
// its CHECK, so that CHECK is Catch2's assertion in every test file, whatever the include
// order of the torch headers.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#undef CHECK

#if defined(__has_include)
#if __has_include(<catch2/catch_test_macros.hpp>) && \
    (!defined(FUSED_OPS_CATCH2_MAJOR) || FUSED_OPS_CATCH2_MAJOR >= 3)
#define FUSED_OPS_CATCH2_V3 1
#elif __has_include(<catch2/catch.hpp>)
#define FUSED_OPS_CATCH2_V3 0
#else
#error \
    "fused_ops tests: Catch2 not found (neither <catch2/catch_test_macros.hpp> nor <catch2/catch.hpp>)"
#endif
#else
#define FUSED_OPS_CATCH2_V3 (FUSED_OPS_CATCH2_MAJOR >= 3)
#endif

#if FUSED_OPS_CATCH2_V3
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#define FUSED_CONTAINS(s) ::Catch::Matchers::ContainsSubstring(s)
#else
#include <catch2/catch.hpp>
#define FUSED_CONTAINS(s) ::Catch::Matchers::Contains(s)
#endif

#include <iostream>

// expr throws a c10::Error (what TORCH_CHECK throws) whose message matches `matcher`.
#define REQUIRE_C10_ERROR(expr, matcher)   \
  do {                                     \
    REQUIRE_THROWS_AS(expr, ::c10::Error); \
    REQUIRE_THROWS_WITH(expr, matcher);    \
  } while (false)

// Skips the rest of the current test case, saying why. The printed line lets CTest report
// the test as skipped with any Catch2 version (cpp_tests/CMakeLists.txt).
#if FUSED_OPS_CATCH2_V3 && defined(SKIP)
#define FUSED_SKIP(reason)                                                      \
  do {                                                                          \
    std::cout << "fused_ops_tests: skipped CUDA test: " << reason << std::endl; \
    SKIP(reason);                                                               \
  } while (false)
#else
#define FUSED_SKIP(reason)                                                      \
  do {                                                                          \
    std::cout << "fused_ops_tests: skipped CUDA test: " << reason << std::endl; \
    WARN("skipped: " << reason);                                                \
    return;                                                                     \
  } while (false)
#endif
