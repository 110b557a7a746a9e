// engine_cuda_test runs the engine's determinism tests with SmallConfig() on the GPU; without
// a usable CUDA device every test is skipped.
#include <gtest/gtest.h>

#include "engine/forward_backend.h"

namespace tokenmill::testing {
namespace {

class CudaOnlyEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const Status available = CheckDeviceAvailable(Device::kCuda);
    if (!available.ok()) GTEST_SKIP() << available.message();
  }
};

const ::testing::Environment* const kCudaOnly =
    ::testing::AddGlobalTestEnvironment(new CudaOnlyEnvironment);

}  // namespace
}  // namespace tokenmill::testing
