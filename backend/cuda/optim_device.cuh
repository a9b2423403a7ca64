// Device helpers of the optimizer update kernels (kernels_optim.cu,
// kernels_optim_rows.cu): the step's scalars (lr, step, grad_scale) read
// from device memory in any floating dtype, and arithmetic rounded as the
// CPU kernels round it. Only .cu files include this.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/device_math.cuh"

namespace kiln::cuda {

inline constexpr size_t kScalars = 3;  // lr, step, grad_scale

/// Dtype codes the device side switches on.
enum : uint8_t { kF32 = 0, kF64 = 1, kF16 = 2, kBF16 = 3 };

inline uint8_t dtypeCode(DType t) {
  switch (t) {
    case DType::F32:
      return kF32;
    case DType::F64:
      return kF64;
    case DType::F16:
      return kF16;
    case DType::BF16:
      return kBF16;
    default:
      fail("optimizer kernels: dtype " + std::string(dtypeName(t)) + " is not floating");
  }
}

/// Device pointers and dtypes of lr, step and grad_scale.
struct ScalarRefs {
  const void* p[kScalars];
  uint8_t dtype[kScalars];
};

/// The first three device tensors of an update's inputs (lr, step, grad_scale).
template <class Tensors>
ScalarRefs scalarRefs(const Tensors& in) {
  ScalarRefs s{};
  for (size_t i = 0; i < kScalars; ++i) {
    s.p[i] = in[i].data;
    s.dtype[i] = dtypeCode(in[i].dtype());
  }
  return s;
}

__device__ __forceinline__ double loadScalar(const void* p, uint8_t code) {
  switch (code) {
    case kF64:
      return *static_cast<const double*>(p);
    case kF16:
      return static_cast<double>(__half2float(*static_cast<const __half*>(p)));
    case kBF16:
      return static_cast<double>(__bfloat162float(*static_cast<const __nv_bfloat16*>(p)));
    default:
      return static_cast<double>(*static_cast<const float*>(p));
  }
}

// Correctly rounded operations, never contracted into FMAs (the CPU's order):
// device_math.cuh's products and sums, and the quotient and root here.
using kiln_device::kadd;
using kiln_device::kmul;
__device__ __forceinline__ float divide(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ __forceinline__ double divide(double a, double b) {
  return __ddiv_rn(a, b);
}
__device__ __forceinline__ float root(float a) {
  return __fsqrt_rn(a);
}
__device__ __forceinline__ double root(double a) {
  return __dsqrt_rn(a);
}

}  // namespace kiln::cuda
