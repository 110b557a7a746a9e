#include "kernels/cuda/device.h"

#include <gtest/gtest.h>

namespace tokenmill::cuda {
namespace {

TEST(CudaDeviceTest, EveryDeviceDescribesItself) {
  const int count = CountDevices();
  if (count == 0) GTEST_SKIP() << "no CUDA device here";
  for (int i = 0; i < count; ++i) {
    EXPECT_NE(DescribeDevice(i).find("sm_"), std::string::npos) << DescribeDevice(i);
  }
}

TEST(CudaDeviceTest, ABadIndexIsAnErrorNotACrash) {
  EXPECT_EQ(DescribeDevice(1 << 20).find("sm_"), std::string::npos);
}

}  // namespace
}  // namespace tokenmill::cuda
