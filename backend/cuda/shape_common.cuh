// Helpers the CUDA layout kernels (kernels_shape.cu) and index kernels
// (kernels_index.cu) share: element and index loads of any dtype, the
// grid-stride loop, the [outer, size, inner] split around an axis, and the
// rank limit of the geometries passed to kernels. Only .cu files include
// this.
#pragma once

#include <cuda_runtime.h>

#include <span>

#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"

namespace kiln::cuda::shape {

using Ins = std::span<const DeviceTensor>;
using Outs = std::span<const DeviceTensor>;

inline constexpr int kThreads = 256;
inline constexpr int kMaxDims = 8;

// ---- element access (cuda_dtype.cuh's conv: cpu_loops.h's rules) -----------

/// Element i of a tensor of dtype `dt`, converted to To (a uniform branch).
template <class To>
__device__ __forceinline__ To loadAs(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::F32:
      return conv<To>(static_cast<const float*>(p)[i]);
    case DType::F64:
      return conv<To>(static_cast<const double*>(p)[i]);
    case DType::F16:
      return conv<To>(static_cast<const __half*>(p)[i]);
    case DType::BF16:
      return conv<To>(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::I64:
      return conv<To>(static_cast<const int64_t*>(p)[i]);
    case DType::I32:
      return conv<To>(static_cast<const int32_t*>(p)[i]);
    case DType::I16:
      return conv<To>(static_cast<const int16_t*>(p)[i]);
    case DType::I8:
      return conv<To>(static_cast<const int8_t*>(p)[i]);
    case DType::U8:
      return conv<To>(static_cast<const uint8_t*>(p)[i]);
    default:
      return conv<To>(static_cast<const bool*>(p)[i]);
  }
}

/// Index element i of an integer index tensor of dtype `dt`.
__device__ __forceinline__ int64_t loadIndex(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::I32:
      return static_cast<const int32_t*>(p)[i];
    case DType::I16:
      return static_cast<const int16_t*>(p)[i];
    case DType::I8:
      return static_cast<const int8_t*>(p)[i];
    case DType::U8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::Bool:
      return static_cast<const bool*>(p)[i];
    default:
      return static_cast<const int64_t*>(p)[i];
  }
}

inline unsigned char* bytes(const DeviceTensor& t) {
  return static_cast<unsigned char*>(t.data);
}

/// Grid-stride loop bounds of the calling thread.
__device__ __forceinline__ int64_t firstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t gridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

/// Shape as [outer, size(axis), inner] around `axis` (a 0-d tensor is [1, 1, 1]).
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
inline AxisSplit splitAt(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    (d < axis ? a.outer : d == axis ? a.size : a.inner) *= s[d];
  return a;
}

/// Predicate: every input and output has at most kMaxDims dims (the
/// geometries passed to the kernels hold that many).
inline bool ranksFit(const Node& n) {
  for (const Value* v : n.inputs())
    if (v->type().rank() > kMaxDims) return false;
  for (const Value* v : n.outputs())
    if (v->type().rank() > kMaxDims) return false;
  return true;
}

}  // namespace kiln::cuda::shape
