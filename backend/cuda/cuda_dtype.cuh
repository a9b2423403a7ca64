// Device-side dtype helpers for Kiln's own CUDA kernels: load any floating
// storage type as float (compute is fp32, as PyTorch's for f16/bf16),
// store a float back with round-to-nearest-even, and dispatch a DType to a
// template over the storage type. Only .cu files include this.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/result.h"

namespace kiln::cuda {

template <typename T>
__device__ __forceinline__ float toFloat(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float toFloat<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float toFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T fromFloat(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/// The compute type of a storage type: double for double, float otherwise.
template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };

/// Call `fn(T{})` for the floating storage type of `dt` (f32, f64, f16,
/// bf16); any other dtype throws, naming `what`.
template <typename Fn>
void dispatchFloating(DType dt, const char* what, Fn&& fn) {
  switch (dt) {
    case DType::F32: fn(float{}); return;
    case DType::F64: fn(double{}); return;
    case DType::F16: fn(__half{}); return;
    case DType::BF16: fn(__nv_bfloat16{}); return;
    default: fail(std::string(what) + ": dtype " + std::string(dtypeName(dt)) + " is not floating");
  }
}

/// As dispatchFloating, plus the integer and bool dtypes (bool as uint8_t).
template <typename Fn>
void dispatchAll(DType dt, const char* what, Fn&& fn) {
  switch (dt) {
    case DType::I64: fn(int64_t{}); return;
    case DType::I32: fn(int32_t{}); return;
    case DType::I16: fn(int16_t{}); return;
    case DType::I8: fn(int8_t{}); return;
    case DType::U8: fn(uint8_t{}); return;
    case DType::Bool: fn(bool{}); return;
    default: dispatchFloating(dt, what, fn);
  }
}

/// Blocks of `threads` covering `n` elements, capped so a grid-stride loop
/// covers the rest (launch configuration of the elementwise kernels).
inline unsigned gridFor(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

/// The seed of this run, mixed with the node index exactly as the CPU's
/// dropout does (backend/cpu/kernels_nn.cpp), so masks match the CPU's.
__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Record a data fault of node `node_index` (first one wins).
__device__ __forceinline__ void raiseError(int* flag, uint64_t node_index) {
  if (flag) atomicCAS(flag, 0, static_cast<int>(node_index + 1));
}

}  // namespace kiln::cuda
