// Device-side dtype helpers for Kiln's own CUDA kernels (every kernels_*.cu):
// the storage/compute type traits and conversions (f16/bf16 compute in fp32,
// as PyTorch's, and round to nearest even on store; cpu::convert's rules for
// the elementwise and layout kernels), and dispatch of a DType, or of an
// element size, to a template over the storage type. Only .cu files include
// this.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "core/ir.h"
#include "core/result.h"

namespace kiln::cuda {

// ---- storage and compute types --------------------------------------------------

/// f16 and bf16: stored in 16 bits, computed in float.
template <class T>
inline constexpr bool kIsHalf = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
/// Every floating storage type.
template <class T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsHalf<T>;

/// A floating storage value as float, and a float back as T (round to
/// nearest even).
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
template <typename T>
struct Compute {
  using type = float;
};
template <>
struct Compute<double> {
  using type = double;
};
template <class T>
using Cmp = typename Compute<T>::type;

// cpu_loops.h's rules (the elementwise and layout kernels): a value computes
// in its own type, the half types in float.

__host__ __device__ __forceinline__ float ld(__half v) {
  return __half2float(v);
}
__host__ __device__ __forceinline__ float ld(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <class T>
__host__ __device__ __forceinline__ T ld(T v) {
  return v;
}
/// What ld returns: float for the half types, the type itself otherwise.
template <class T>
using ld_t = std::conditional_t<kIsHalf<T>, float, T>;

/// Store a compute value as T (half types round to nearest even).
template <class T, class C>
__host__ __device__ __forceinline__ T st(C v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

/// cpu::convert: to bool is != 0 (NaN is true); floating to integer truncates
/// through int64 (narrow types wrap); to a half type through float.
template <class To, class From>
__host__ __device__ __forceinline__ To conv(From v) {
  using CF = ld_t<From>;
  const CF c = ld(v);
  if constexpr (std::is_same_v<To, bool>)
    return c != CF(0);
  else if constexpr (std::is_integral_v<To> && kIsFloat<From>)
    return static_cast<To>(static_cast<int64_t>(c));
  else if constexpr (kIsHalf<To>)
    return st<To>(static_cast<float>(c));
  else
    return static_cast<To>(c);
}

// A chosen compute type C (the norm, loss, reduction and pooling kernels).

/// A storage value in compute type C.
template <class C, class T>
__device__ __forceinline__ C load(T v) {
  if constexpr (kIsHalf<T>)
    return static_cast<C>(toFloat(v));
  else
    return static_cast<C>(v);
}

/// A compute value stored as Out: the half types round to nearest even, bool
/// is v != 0.
template <class Out, class C>
__device__ __forceinline__ Out store(C v) {
  if constexpr (kIsHalf<Out>)
    return fromFloat<Out>(static_cast<float>(v));
  else if constexpr (std::is_same_v<Out, bool>)
    return v != C(0);
  else
    return static_cast<Out>(v);
}

// ---- dispatch ---------------------------------------------------------------------

/// Call `fn(T{})` for the floating storage type of `dt` (f32, f64, f16,
/// bf16); any other dtype throws, naming `what`.
template <typename Fn>
void dispatchFloating(DType dt, const char* what, Fn&& fn) {
  switch (dt) {
    case DType::F32:
      fn(float{});
      return;
    case DType::F64:
      fn(double{});
      return;
    case DType::F16:
      fn(__half{});
      return;
    case DType::BF16:
      fn(__nv_bfloat16{});
      return;
    default:
      fail(std::string(what) + ": dtype " + std::string(dtypeName(dt)) + " is not floating");
  }
}

/// As dispatchFloating, plus the integer and bool dtypes (bool as uint8_t).
template <typename Fn>
void dispatchAll(DType dt, const char* what, Fn&& fn) {
  switch (dt) {
    case DType::I64:
      fn(int64_t{});
      return;
    case DType::I32:
      fn(int32_t{});
      return;
    case DType::I16:
      fn(int16_t{});
      return;
    case DType::I8:
      fn(int8_t{});
      return;
    case DType::U8:
      fn(uint8_t{});
      return;
    case DType::Bool:
      fn(bool{});
      return;
    default:
      dispatchFloating(dt, what, fn);
  }
}

/// Call `fn(E{})` for the unsigned integer E of `bytes` bytes (moving
/// elements needs only their size); any other size throws, naming `n`.
template <class Fn>
void dispatchBySize(size_t bytes, const Node* n, Fn&& fn) {
  switch (bytes) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    case 8:
      return fn(uint64_t{});
    default:
      fail((n ? n->describe() + ": " : std::string()) + "unsupported element size " + std::to_string(bytes));
  }
}

// ---- launch configuration, random numbers, data faults ----------------------------

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
