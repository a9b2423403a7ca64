// Small kernels of the executor's own: the per-run seed advances on the
// device, inside the captured graph, so a replayed step draws new random
// numbers without the host writing anything.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_step_kernels.h"

namespace kiln::cuda {
namespace {

__global__ void advanceSeedKernel(uint64_t* seed) {
  *seed += 0x9E3779B97F4A7C15ull;
}

}  // namespace

void enqueueAdvanceSeed(uint64_t* seed, cudaStream_t s) {
  advanceSeedKernel<<<1, 1, 0, s>>>(seed);
  checkLaunch("advanceSeedKernel", nullptr);
}

}  // namespace kiln::cuda
