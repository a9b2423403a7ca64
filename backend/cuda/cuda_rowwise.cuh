// Row-wise kernels of Kiln's own CUDA backend (kernels_softmax.cu, kernels_norm.cu's
// layer_norm, kernels_loss.cu's cross_entropy): a row of up to 1024
// elements runs a warp with the row in registers (warpPer, withPer), a longer
// one a block walking the row with 16-byte vector loads (walkRow); rowGrid
// sizes the grid, and ex / lg / negInf are the compute-type math of their
// online softmax statistics. Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_reduce.cuh"

namespace kiln::cuda {

// ---- compute-type math ---------------------------------------------------------

__device__ __forceinline__ float ex(float v) {
  return expf(v);
}
__device__ __forceinline__ double ex(double v) {
  return exp(v);
}
__device__ __forceinline__ float lg(float v) {
  return logf(v);
}
__device__ __forceinline__ double lg(double v) {
  return log(v);
}

template <class C>
__device__ __forceinline__ C negInf() {
  return -std::numeric_limits<C>::infinity();
}

// ---- launch shapes -------------------------------------------------------------

/// The warp path's registers per lane for a row of n (n <= 1024), or 0.
inline int warpPer(int64_t n) {
  if (n <= 32) return 1;
  if (n <= 128) return 4;
  if (n <= 256) return 8;
  if (n <= 512) return 16;
  if (n <= 1024) return 32;
  return 0;
}

/// Call fn(std::integral_constant<int, kPer>{}) for the warp path's kPer.
template <class Fn>
void withPer(int per, Fn&& fn) {
  switch (per) {
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 4:
      return fn(std::integral_constant<int, 4>{});
    case 8:
      return fn(std::integral_constant<int, 8>{});
    case 16:
      return fn(std::integral_constant<int, 16>{});
    default:
      return fn(std::integral_constant<int, 32>{});
  }
}

/// Blocks for `rows` rows at `per_block` rows a block (grid-stride beyond 2^30).
inline unsigned rowGrid(int64_t rows, int64_t per_block) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceilDiv(rows, per_block), 1, int64_t{1} << 30));
}

// ---- a warp holding a row -------------------------------------------------------

/// The warp path's first pass over a row of n <= 32 * kPer: lane's elements
/// into v (-inf past the end) and the row's exact max in every lane (0 for a
/// row of only -inf, the CPU's convention).
template <class T, int kPer>
__device__ __forceinline__ Cmp<T> warpRowMax(const T* src, int n, int lane, Cmp<T> (&v)[kPer]) {
  using C = Cmp<T>;
  C m = negInf<C>();
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    v[q] = k < n ? load<C>(src[k]) : negInf<C>();
    m = v[q] > m ? v[q] : m;
  }
  m = warpAll(m, MaxOne{});
  if (m == negInf<C>()) m = C(0);
  return m;
}

// ---- a block walking a row -----------------------------------------------------

/// Each thread of the block visits its elements of kIn rows of n values
/// (same length, same offsets), f(k, v[kIn]) in compute type; with kWrite, f
/// returns the value stored at out[k]. 16-byte vector loads/stores when all
/// rows share their alignment, scalar head and tail.
template <class T, int kIn, bool kWrite, class F>
__device__ __forceinline__ void walkRow(const T* const (&in)[kIn], T* out, int64_t n, F&& f) {
  using C = Cmp<T>;
  constexpr int kVec = 16 / sizeof(T);
  const int64_t tid = threadIdx.x, nt = blockDim.x;
  const unsigned mis = static_cast<unsigned>(reinterpret_cast<uintptr_t>(in[0]) % 16);
  bool ok = mis % sizeof(T) == 0;
#pragma unroll
  for (int i = 1; i < kIn; ++i) ok = ok && reinterpret_cast<uintptr_t>(in[i]) % 16 == mis;
  if constexpr (kWrite) ok = ok && reinterpret_cast<uintptr_t>(out) % 16 == mis;
  int64_t head = n;
  if (ok) {
    const int64_t lead = static_cast<int64_t>(((16 - mis) % 16) / sizeof(T));
    head = lead < n ? lead : n;
  }
  auto scalar = [&](int64_t k) {
    C v[kIn];
#pragma unroll
    for (int i = 0; i < kIn; ++i) v[i] = load<C>(in[i][k]);
    if constexpr (kWrite)
      out[k] = store<T>(f(k, v));
    else
      f(k, v);
  };
  for (int64_t k = tid; k < head; k += nt) scalar(k);
  const int64_t nvec = (n - head) / kVec;
  for (int64_t j = tid; j < nvec; j += nt) {
    const int64_t k0 = head + j * kVec;
    T e[kIn][kVec];
#pragma unroll
    for (int i = 0; i < kIn; ++i) {
      const uint4 u = *reinterpret_cast<const uint4*>(in[i] + k0);
      memcpy(e[i], &u, 16);
    }
    T o[kVec];
#pragma unroll
    for (int q = 0; q < kVec; ++q) {
      C v[kIn];
#pragma unroll
      for (int i = 0; i < kIn; ++i) v[i] = load<C>(e[i][q]);
      if constexpr (kWrite)
        o[q] = store<T>(f(k0 + q, v));
      else
        f(k0 + q, v);
    }
    if constexpr (kWrite) {
      uint4 u;
      memcpy(&u, o, 16);
      *reinterpret_cast<uint4*>(out + k0) = u;
    }
  }
  for (int64_t k = head + nvec * kVec + tid; k < n; k += nt) scalar(k);
}

}  // namespace kiln::cuda
