// Integer index tensors (class targets, embedding indices) read in CUDA
// kernels: any integer dtype, read as int64 through one switch that is
// uniform across the grid, instead of a kernel per index dtype. Only .cu
// files include this.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_kernel.h"

namespace kiln::cuda {

/// Integer indices of any integer dtype, read as int64 (one switch, uniform
/// across the grid, instead of a kernel per index dtype).
struct Index {
  const void* p;
  int kind;
  __device__ __forceinline__ int64_t operator[](int64_t i) const {
    switch (kind) {
      case 0:
        return static_cast<const int64_t*>(p)[i];
      case 1:
        return static_cast<const int32_t*>(p)[i];
      case 2:
        return static_cast<const int16_t*>(p)[i];
      case 3:
        return static_cast<const int8_t*>(p)[i];
      default:
        return static_cast<const uint8_t*>(p)[i];
    }
  }
};

inline Index indexOf(const DeviceTensor& t, const Node& n) {
  switch (t.dtype()) {
    case DType::I64:
      return {t.data, 0};
    case DType::I32:
      return {t.data, 1};
    case DType::I16:
      return {t.data, 2};
    case DType::I8:
      return {t.data, 3};
    case DType::U8:
      return {t.data, 4};
    default:
      fail(n.describe() + ": indices must be integers, got " + t.type.str());
  }
}

inline bool integralDType(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I16 || t == DType::I8 || t == DType::U8;
}

}  // namespace kiln::cuda
