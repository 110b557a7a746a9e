// Global -> shared copies that a thread issues and later waits for (internal to kernels/cuda):
// cp.async on sm_80 and later, so a block computes on one shared-memory tile while the next
// one lands. Older architectures (the project builds for sm_80 / sm_89 / sm_90; this keeps a
// lower CMAKE_CUDA_ARCHITECTURES compiling and correct) copy synchronously, and committing and
// waiting do nothing. Either way a copy is complete for the thread that issued it after
// WaitCopies, and for the other threads of the block only after a __syncthreads that follows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tokenmill::cuda::internal {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TM_CP_ASYNC 1
#else
#define TM_CP_ASYNC 0
#endif

// 16 bytes, both addresses 16-byte aligned. .cg: cached in L2 only (a K/V tile is read from
// global memory once per block; L1 would only hold it twice).
__device__ inline void CopyAsync16(void* shared_dst, const void* global_src) {
#if TM_CP_ASYNC
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src)
               : "memory");
#else
  *static_cast<uint4*>(shared_dst) = *static_cast<const uint4*>(global_src);
#endif
}

// 4 bytes (a float), both addresses 4-byte aligned (.ca: the only variant for under 16 bytes).
__device__ inline void CopyAsync4(void* shared_dst, const void* global_src) {
#if TM_CP_ASYNC
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(global_src)
               : "memory");
#else
  *static_cast<uint32_t*>(shared_dst) = *static_cast<const uint32_t*>(global_src);
#endif
}

// Closes the group of this thread's copies issued since the last commit (a group may be empty).
__device__ inline void CommitCopies() {
#if TM_CP_ASYNC
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's most recent groups are still in flight.
template <int kPending>
__device__ inline void WaitCopies() {
#if TM_CP_ASYNC
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

#undef TM_CP_ASYNC

}  // namespace tokenmill::cuda::internal
