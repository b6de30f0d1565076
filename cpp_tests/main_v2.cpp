// Catch2 v2 has no main library: this translation unit provides main(). Compiled only with
// Catch2 v2 (cpp_tests/CMakeLists.txt); Catch2 v3 links Catch2WithMain / libCatch2Main.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
