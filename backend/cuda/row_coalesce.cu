// Coalescing keyed rows into a row-sparse tensor: see row_coalesce.h.
#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/row_coalesce.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxSources = (int64_t{1} << 31) - 1;  // int32 positions, uint32 keys below the bound

/// CUB's scratch for the inclusive scan of `count` int32 flags; the same
/// kind of bound as sortTempBytes without a device.
size_t scanTempBytes(int64_t count) {
  size_t bytes = 0;
  const cudaError_t e = cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                      static_cast<int32_t*>(nullptr), static_cast<int>(count));
  if (e == cudaSuccess) return bytes;
  cudaGetLastError();
  return static_cast<size_t>(count) * 8 + (size_t{1} << 20);
}

__global__ void __launch_bounds__(kThreads) iotaKernel(int32_t* __restrict__ p, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<int32_t>(i);
}

/// 1 at the first source of each kept key (the keys are sorted).
__global__ void __launch_bounds__(kThreads)
    headsKernel(const uint32_t* __restrict__ keys, int32_t* __restrict__ heads, int64_t n, uint32_t bound) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x)
    heads[j] = keys[j] < bound && (j == 0 || keys[j - 1] != keys[j]) ? 1 : 0;
}

/// Distinct key number u (the inclusive scan of the heads, minus one) gets
/// its run [starts[u], ends[u]) of sorted sources.
__global__ void __launch_bounds__(kThreads)
    runsKernel(const uint32_t* __restrict__ keys, const int32_t* __restrict__ numbers, int32_t* __restrict__ starts,
               int32_t* __restrict__ ends, int64_t n, uint32_t bound, int64_t capacity) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t k = keys[j];
    if (k >= bound) continue;
    const int64_t u = numbers[j] - 1;
    if (u >= capacity) continue;  // cannot happen: capacity >= the distinct kept keys (rowCoalesceLayout)
    if (j == 0 || keys[j - 1] != k) starts[u] = static_cast<int32_t>(j);
    if (j == n - 1 || keys[j + 1] != k) ends[u] = static_cast<int32_t>(j + 1);
  }
}

/// Output row u: its key, or -1 past the distinct keys.
__global__ void __launch_bounds__(kThreads)
    rowsKernel(const uint32_t* __restrict__ keys, const int32_t* __restrict__ starts, int64_t* __restrict__ rows,
               int64_t capacity) {
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < capacity;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x)
    rows[u] = starts[u] < 0 ? -1 : static_cast<int64_t>(keys[starts[u]]);
}

/// A thread per (output row, column): the run's sources summed in order
/// from +0 (eight loads in flight, added one by one); zero past the
/// distinct keys.
template <class T>
__global__ void __launch_bounds__(kThreads)
    sumKernel(const T* __restrict__ values, const int32_t* __restrict__ positions, const int32_t* __restrict__ starts,
              const int32_t* __restrict__ ends, T* __restrict__ out, int64_t capacity, int64_t dim) {
  using C = Cmp<T>;
  constexpr int kUnroll = 8;
  const int64_t total = capacity * dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t u = idx / dim, d = idx % dim;
    const int32_t lo = starts[u];
    C acc = C(0);
    if (lo >= 0) {
      const int32_t hi = ends[u];
      int32_t j = lo;
      for (; j + kUnroll <= hi; j += kUnroll) {
        C v[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) v[k] = load<C>(values[static_cast<int64_t>(positions[j + k]) * dim + d]);
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) acc += v[k];
      }
      for (; j < hi; ++j) acc += load<C>(values[static_cast<int64_t>(positions[j]) * dim + d]);
    }
    out[idx] = store<T>(acc);
  }
}

}  // namespace

int keyBits(int64_t bound) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= bound) ++bits;  // the bound itself (the sentinel) must fit
  return bits;
}

size_t sortTempBytes(int64_t count, int64_t bound) {
  size_t bytes = 0;
  const cudaError_t e = cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(count), 0, keyBits(bound));
  if (e == cudaSuccess) return bytes;
  cudaGetLastError();
  return static_cast<size_t>(count) * 24 + (size_t{4} << 20);
}

RowCoalesceLayout rowCoalesceLayout(int64_t sources, int64_t bound, int64_t capacity) {
  if (sources < 0 || sources > kMaxSources || bound < 0 || bound >= kMaxSources || capacity < 0)
    fail("row coalesce: " + std::to_string(sources) + " sources of a " + std::to_string(bound) +
         "-row table are past the GPU kernel's 2^31 - 1");
  if (capacity < std::min(sources, bound))
    fail("row coalesce: an output of " + std::to_string(capacity) + " rows cannot hold the distinct rows of " +
         std::to_string(sources) + " sources");
  RowCoalesceLayout l;
  l.sources = sources;
  l.bound = bound;
  l.capacity = capacity;
  const size_t s = alignUp(static_cast<size_t>(sources) * 4), c = alignUp(static_cast<size_t>(capacity) * 4);
  l.keys = 0;
  l.sorted_keys = l.keys + s;
  l.positions = l.sorted_keys + s;
  l.sorted_positions = l.positions + s;
  l.heads = l.sorted_positions + s;
  l.numbers = l.heads + s;
  l.starts = l.numbers + s;
  l.ends = l.starts + c;
  l.temp = l.ends + c;
  l.temp_bytes = sources > 0 ? std::max(sortTempBytes(sources, bound), scanTempBytes(sources)) : 0;
  l.total = l.temp + alignUp(l.temp_bytes);
  return l;
}

void enqueueRowCoalesce(void* workspace, const RowCoalesceLayout& l, const void* values, DType dtype, int64_t dim,
                        int64_t* rows_out, void* values_out, cudaStream_t stream, const Node* node) {
  auto* ws = static_cast<unsigned char*>(workspace);
  auto* keys = reinterpret_cast<uint32_t*>(ws + l.keys);
  auto* sorted_keys = reinterpret_cast<uint32_t*>(ws + l.sorted_keys);
  auto* positions = reinterpret_cast<int32_t*>(ws + l.positions);
  auto* sorted_positions = reinterpret_cast<int32_t*>(ws + l.sorted_positions);
  auto* heads = reinterpret_cast<int32_t*>(ws + l.heads);
  auto* numbers = reinterpret_cast<int32_t*>(ws + l.numbers);
  auto* starts = reinterpret_cast<int32_t*>(ws + l.starts);
  auto* ends = reinterpret_cast<int32_t*>(ws + l.ends);
  if (l.capacity == 0) return;
  check(cudaMemsetAsync(starts, 0xFF, static_cast<size_t>(l.capacity) * 4, stream), "cudaMemsetAsync", node);
  const int64_t n = l.sources;
  const auto bound = static_cast<uint32_t>(l.bound);
  if (n > 0) {
    iotaKernel<<<gridFor(n), kThreads, 0, stream>>>(positions, n);
    checkLaunch("iotaKernel", node);
    size_t temp_bytes = l.temp_bytes;
    check(cub::DeviceRadixSort::SortPairs(ws + l.temp, temp_bytes, keys, sorted_keys, positions, sorted_positions,
                                          static_cast<int>(n), 0, keyBits(l.bound), stream),
          "cub::DeviceRadixSort::SortPairs", node);
    headsKernel<<<gridFor(n), kThreads, 0, stream>>>(sorted_keys, heads, n, bound);
    checkLaunch("headsKernel", node);
    temp_bytes = l.temp_bytes;
    check(cub::DeviceScan::InclusiveSum(ws + l.temp, temp_bytes, heads, numbers, static_cast<int>(n), stream),
          "cub::DeviceScan::InclusiveSum", node);
    runsKernel<<<gridFor(n), kThreads, 0, stream>>>(sorted_keys, numbers, starts, ends, n, bound, l.capacity);
    checkLaunch("runsKernel", node);
  }
  rowsKernel<<<gridFor(l.capacity), kThreads, 0, stream>>>(sorted_keys, starts, rows_out, l.capacity);
  checkLaunch("rowsKernel", node);
  if (dim == 0) return;
  dispatchFloating(dtype, "row coalesce", [&](auto tag) {
    using T = decltype(tag);
    sumKernel<T><<<gridFor(l.capacity * dim), kThreads, 0, stream>>>(
        static_cast<const T*>(values), sorted_positions, starts, ends, static_cast<T*>(values_out), l.capacity, dim);
    checkLaunch("sumKernel", node);
  });
}

}  // namespace kiln::cuda
