// The executor's own device kernels (cuda_step_kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kiln::cuda {

/// *seed += the golden-ratio increment: run k + 1 draws from the CPU's
/// seed of run k + 1 (backend/cpu/cpu_executor.cpp: seed + k * 0x9E37...).
void enqueueAdvanceSeed(uint64_t* seed, cudaStream_t s);

}  // namespace kiln::cuda
