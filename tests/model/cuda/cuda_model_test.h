// The CUDA forward tests' fixture: skipped without a CUDA device (CudaTest); otherwise the
// golden file and model of the parameter's stem are loaded and a CudaForwardPass created,
// with a thread pool for CPU reference passes.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "kernels/cpu/thread_pool.h"
#include "model/cuda/cuda_forward.h"
#include "model/forward.h"
#include "tests/kernels/cuda/cuda_test.h"
#include "tests/model/forward/golden.h"

namespace tokenmill::cuda {

// Case: a test parameter with the golden file's stem in `stem`.
template <typename Case>
class CudaModelTest : public CudaTest, public ::testing::WithParamInterface<Case> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    golden_ = testing::LoadGolden(this->GetParam().stem);
    auto model = Model::Load(std::string(TOKENMILL_MODELS_DIR) + "/" + golden_.model_file);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    auto gpu = CudaForwardPass::Create(*model_);
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    gpu_ = std::move(*gpu);
  }

  // The CPU's reference kernels (KernelMode::kReference), to hold the GPU's logits against.
  ForwardPass CpuReference() {
    return ForwardPass(*model_, CpuContext{&KernelTable(BestCpuIsa()), &pool_},
                       KernelMode::kReference);
  }

  testing::Golden golden_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<CudaForwardPass> gpu_;
  ThreadPool pool_{2};
};

}  // namespace tokenmill::cuda
