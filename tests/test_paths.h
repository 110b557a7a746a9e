// Where the tests find the models and their golden data: this build's TOKENMILL_MODELS_DIR and
// TOKENMILL_TEST_DATA_DIR (tests/CMakeLists.txt). They are compiled into one small file
// generated in the build directory (test_paths.cc.in), not passed to every test's compile: a
// command line naming the checkout would make the compiler cache miss in a clone elsewhere.
#pragma once

#include <string>

namespace tokenmill {

std::string TestModelsDir();
std::string TestDataDir();

}  // namespace tokenmill
