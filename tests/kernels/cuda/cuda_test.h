// The gpu-labelled tests' base fixture: every test of a fixture derived from CudaTest is
// skipped, not failed, where no CUDA device is present (CI, laptops).
#pragma once

#include <gtest/gtest.h>

#include "kernels/cuda/device.h"

namespace tokenmill::cuda {

class CudaTest : public ::testing::Test {
 protected:
  // A derived SetUp calls this first and returns when IsSkipped().
  void SetUp() override {
    if (CountDevices() == 0) GTEST_SKIP() << "no CUDA device here";
  }
};

}  // namespace tokenmill::cuda
