// Deterministic reductions for Kiln's own CUDA kernels: warp and block
// combinations in a fixed tree (kernels_norm.cu, kernels_softmax.cu, kernels_loss.cu,
// kernels_reduction.cu); kernels_reduction.cu and kernels_norm.cu run their
// row and column kernels by reduce_plan.h's Plan. Results depend only on the
// data and the shape, never on timing. Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/reduce_plan.h"
#include "core/result.h"

namespace kiln::cuda {

// ---- warp and block combinations -----------------------------------------------

/// __shfl_down_sync of any 4-byte-multiple value, word by word.
template <class A>
__device__ __forceinline__ A shflDown(const A& v, int offset, int width = 32) {
  static_assert(sizeof(A) % 4 == 0, "whole 32-bit words");
  constexpr int kWords = sizeof(A) / 4;
  int w[kWords];
  memcpy(w, &v, sizeof(A));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_down_sync(0xffffffffu, w[k], offset, width);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

/// __shfl_sync of any 4-byte-multiple value, word by word.
template <class A>
__device__ __forceinline__ A shflIdx(const A& v, int lane) {
  static_assert(sizeof(A) % 4 == 0, "whole 32-bit words");
  constexpr int kWords = sizeof(A) / 4;
  int w[kWords];
  memcpy(w, &v, sizeof(A));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_sync(0xffffffffu, w[k], lane);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

/// The warp's combination of `a` (a fixed tree), in every lane.
template <class A, class F>
__device__ __forceinline__ A warpAll(A a, F comb) {
  for (int off = 16; off > 0; off /= 2) a = comb(a, shflDown(a, off));
  return shflIdx(a, 0);
}

/// The block's combination of `a` (blockDim.x a multiple of 32), in every
/// thread; a fixed tree, so the result depends only on the data.
template <class A, class F>
__device__ A blockAll(A a, F comb) {
  __shared__ __align__(16) unsigned char raw[33 * sizeof(A)];
  A* sm = reinterpret_cast<A*>(raw);
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
  for (int off = 16; off > 0; off /= 2) a = comb(a, shflDown(a, off));
  if (lane == 0) sm[wid] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    A r = sm[0];
    for (int k = 1; k < nw; ++k) r = comb(r, sm[k]);
    sm[32] = r;
  }
  __syncthreads();
  const A r = sm[32];
  __syncthreads();
  return r;
}

struct AddOne {
  template <class C>
  __device__ C operator()(C x, C y) const {
    return x + y;
  }
};
struct MaxOne {
  template <class C>
  __device__ C operator()(C x, C y) const {
    return y > x ? y : x;  // NaN ignored, like the CPU's std::max
  }
};

/// Combine an op's accumulators over the W threads along x of a 2-D block
/// (W a power of two; `raw` shared memory for W / 32 accumulators per y);
/// the result is valid in threadIdx.x == 0.
template <class Op>
__device__ typename Op::Acc reduceAcrossX(const Op& op, typename Op::Acc a, int W, unsigned char* raw) {
  using Acc = typename Op::Acc;
  const int width = W < 32 ? W : 32;
  for (int off = width / 2; off > 0; off /= 2) op.combine(a, shflDown(a, off, width));
  if (W > 32) {
    Acc* sm = reinterpret_cast<Acc*>(raw);
    const int warps = W / 32, lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    if (lane == 0) sm[threadIdx.y * warps + wid] = a;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int k = 1; k < warps; ++k) op.combine(a, sm[threadIdx.y * warps + k]);
  }
  return a;
}

/// Combine an op's accumulators over the H threads along y of a W x H block
/// (H a power of two) through `sm` (W * H accumulators of shared memory);
/// column tx's result is sm[tx], for every thread once this returns.
template <class Op>
__device__ __forceinline__ void reduceAcrossY(const Op& op, typename Op::Acc a, typename Op::Acc* sm, int W, int H) {
  using Acc = typename Op::Acc;
  const int tx = threadIdx.x, ty = threadIdx.y;
  sm[ty * W + tx] = a;
  __syncthreads();
  for (int half = H / 2; half > 0; half /= 2) {
    if (ty < half) {
      Acc v = sm[ty * W + tx];
      op.combine(v, sm[(ty + half) * W + tx]);
      sm[ty * W + tx] = v;
    }
    __syncthreads();
  }
}

}  // namespace kiln::cuda
