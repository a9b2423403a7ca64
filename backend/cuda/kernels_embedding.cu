// CUDA kernels of embedding and embedding_backward {num_weights,
// padding_idx, scale_grad_by_freq} (core/ops/nn.cpp, nn_grad.cpp), with the
// CPU reference's semantics (backend/cpu/kernels_nn.cpp, kernels_nn_grad.cpp),
// and of the row-sparse embedding gradient's embedding_backward_rows and
// rows_to_dense (core/ops/row_sparse.cpp, backend/cpu/kernels_row_sparse.cpp).
// An index out of range cannot throw without a sync: the kernel records the
// node in ctx.error_flag and writes a zero row. The backward sorts the
// indices (CUB, stable) and sums each row's gradients in index order:
// deterministic, no atomics, linear in the indices even at GPT-2's 50257 rows.
#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_index.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_rowwise.cuh"
#include "backend/cuda/row_coalesce.h"  // keyBits, sortTempBytes
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

// ---- embedding (weight, indices) -----------------------------------------------
// Rows copied as raw bytes (any weight dtype), in the widest unit that
// divides a row and the buffers' alignment; a warp per index.

template <class U>
__global__ void __launch_bounds__(kThreads)
    embeddingKernel(const U* __restrict__ w, Index idx, U* __restrict__ out, int64_t count, int64_t rows, int64_t units,
                    int* flag, uint64_t node) {
  const int lane = threadIdx.x % 32;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; i < count;
       i += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t id = idx[i];
    U* dst = out + i * units;
    if (id < 0 || id >= rows) {
      if (lane == 0) raiseError(flag, node);
      U zero;
      memset(&zero, 0, sizeof(U));
      for (int64_t j = lane; j < units; j += 32) dst[j] = zero;
      continue;
    }
    const U* src = w + id * units;
    for (int64_t j = lane; j < units; j += 32) dst[j] = src[j];
  }
}

template <class U>
void launchEmbedding(const DeviceTensor& w, Index idx, const DeviceTensor& out, int64_t count, int64_t row_bytes,
                     CudaContext& ctx) {
  const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
  embeddingKernel<U><<<rowGrid(count, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(
      static_cast<const U*>(w.data), idx, static_cast<U*>(out.data), count, w.shape()[0], units, ctx.error_flag,
      ctx.node_index);
  checkLaunch("embeddingKernel", ctx.node);
}

bool embeddingSupports(const Node& n) {
  return integralDType(n.input(1)->dtype());
}

void embeddingKernelFn(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                       CudaContext& ctx) {
  const DeviceTensor& w = in[0];
  const int64_t count = in[1].numel();
  const int64_t row_bytes = w.shape()[1] * static_cast<int64_t>(dtypeSize(w.dtype()));
  if (count == 0 || row_bytes == 0) return;
  const Index idx = indexOf(in[1], n);
  const auto fits = [&](int64_t unit) {
    return row_bytes % unit == 0 && reinterpret_cast<uintptr_t>(w.data) % unit == 0 &&
           reinterpret_cast<uintptr_t>(out[0].data) % unit == 0;
  };
  if (fits(16))
    launchEmbedding<uint4>(w, idx, out[0], count, row_bytes, ctx);
  else if (fits(8))
    launchEmbedding<uint2>(w, idx, out[0], count, row_bytes, ctx);
  else if (fits(4))
    launchEmbedding<unsigned>(w, idx, out[0], count, row_bytes, ctx);
  else if (fits(2))
    launchEmbedding<unsigned short>(w, idx, out[0], count, row_bytes, ctx);
  else
    launchEmbedding<unsigned char>(w, idx, out[0], count, row_bytes, ctx);
}

// ---- embedding_backward (g, indices) -> [num_weights, dim] ---------------------
// Deterministic and linear, no float atomics: the indices are sorted with
// their positions (CUB's stable radix sort, in the workspace), each weight
// row's run [first, last) of sorted positions is marked, and a thread per
// (weight row, column) sums the gradient rows of its run in position order,
// the CPU's order (so f32 results equal the CPU's bit for bit), writing
// zeros for rows never looked up and for padding_idx. scale_grad_by_freq
// scales each gradient row by 1 / (occurrences of its index), as PyTorch
// does. Work is linear in positions * dim plus the output's size.

struct EmbeddingLayout {
  size_t keys_in = 0, keys_out = 0, vals_in = 0, vals_out = 0, first = 0, last = 0, temp = 0, temp_bytes = 0, total = 0;
};

EmbeddingLayout embeddingLayout(int64_t count, int64_t rows) {
  EmbeddingLayout l;
  const size_t c = alignUp(static_cast<size_t>(count) * 4), r = alignUp(static_cast<size_t>(rows) * 4);
  l.keys_in = 0;
  l.keys_out = l.keys_in + c;
  l.vals_in = l.keys_out + c;
  l.vals_out = l.vals_in + c;
  l.first = l.vals_out + c;
  l.last = l.first + r;
  l.temp = l.last + r;
  l.temp_bytes = count > 0 ? sortTempBytes(count, rows) : 0;
  l.total = l.temp + alignUp(l.temp_bytes);
  return l;
}

size_t embeddingBackwardWorkspace(const Node& n) {
  return embeddingLayout(n.input(1)->type().numel(), n.i("num_weights")).total;
}

/// The sort keys of the indices: the index, or `rows` (sorted last, never
/// summed) for padding_idx and, raising the fault flag, for an index out of
/// range; with `vals`, each position's own number beside it.
__global__ void __launch_bounds__(kThreads)
    embeddingKeysKernel(Index idx, uint32_t* __restrict__ keys, int32_t* __restrict__ vals, int64_t count, int64_t rows,
                        int64_t padding_idx, int* flag, uint64_t node) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t id = idx[i];
    const bool ok = id >= 0 && id < rows;
    if (!ok) raiseError(flag, node);
    keys[i] = static_cast<uint32_t>(ok && id != padding_idx ? id : rows);
    if (vals) vals[i] = static_cast<int32_t>(i);
  }
}

__global__ void __launch_bounds__(kThreads)
    embeddingRunsKernel(const uint32_t* __restrict__ keys, int32_t* __restrict__ first, int32_t* __restrict__ last,
                        int64_t count, int64_t rows) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < count;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t k = keys[j];
    if (k >= rows) continue;
    if (j == 0 || keys[j - 1] != k) first[k] = static_cast<int32_t>(j);
    if (j == count - 1 || keys[j + 1] != k) last[k] = static_cast<int32_t>(j + 1);
  }
}

__device__ __forceinline__ float mulRn(float a, float b) {
  return __fmul_rn(a, b);  // never contracted into an FMA: the CPU's rounding
}
__device__ __forceinline__ double mulRn(double a, double b) {
  return __dmul_rn(a, b);
}

/// A thread per (weight row, column): the row's gradient rows summed in
/// position order (eight loads in flight, added one by one), zero when the
/// row was never looked up or is padding_idx.
template <class T>
__global__ void __launch_bounds__(kThreads)
    embeddingGradKernel(const T* __restrict__ g, const int32_t* __restrict__ pos, const int32_t* __restrict__ first,
                        const int32_t* __restrict__ last, T* __restrict__ out, int64_t rows, int64_t dim,
                        int64_t padding_idx, bool scale_by_freq) {
  using C = Cmp<T>;
  constexpr int kUnroll = 8;
  const int64_t total = rows * dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / dim, d = idx % dim;
    const int32_t lo = first[r];
    C acc = C(0);
    if (lo >= 0 && r != padding_idx) {
      const int32_t hi = last[r];
      const C scale = C(1.0 / static_cast<double>(hi - lo));
      int32_t j = lo;
      for (; j + kUnroll <= hi; j += kUnroll) {
        C v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = load<C>(g[static_cast<int64_t>(pos[j + u]) * dim + d]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc += scale_by_freq ? mulRn(scale, v[u]) : v[u];
      }
      for (; j < hi; ++j) {
        const C v = load<C>(g[static_cast<int64_t>(pos[j]) * dim + d]);
        acc += scale_by_freq ? mulRn(scale, v) : v;
      }
    }
    out[idx] = store<T>(acc);
  }
}

bool embeddingBackwardSupports(const Node& n) {
  return isFloating(n.input(0)->dtype()) && integralDType(n.input(1)->dtype()) &&
         n.input(1)->type().numel() < (int64_t{1} << 31) && n.i("num_weights") < (int64_t{1} << 31) - 1;
}

void embeddingBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                             CudaContext& ctx) {
  const int64_t rows = out[0].shape()[0], dim = out[0].shape()[1], count = in[1].numel();
  if (rows * dim == 0) return;
  const EmbeddingLayout l = embeddingLayout(count, rows);
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, l.total));
  auto* keys_in = reinterpret_cast<uint32_t*>(ws + l.keys_in);
  auto* keys_out = reinterpret_cast<uint32_t*>(ws + l.keys_out);
  auto* vals_in = reinterpret_cast<int32_t*>(ws + l.vals_in);
  auto* vals_out = reinterpret_cast<int32_t*>(ws + l.vals_out);
  auto* first = reinterpret_cast<int32_t*>(ws + l.first);
  auto* last = reinterpret_cast<int32_t*>(ws + l.last);
  check(cudaMemsetAsync(first, 0xFF, static_cast<size_t>(rows) * 4, ctx.stream), "cudaMemsetAsync", ctx.node);
  if (count > 0) {
    const Index idx = indexOf(in[1], n);
    // padding_idx's rows are summed like any other: embeddingGradKernel zeroes them.
    embeddingKeysKernel<<<gridFor(count), kThreads, 0, ctx.stream>>>(idx, keys_in, vals_in, count, rows, -1,
                                                                     ctx.error_flag, ctx.node_index);
    checkLaunch("embeddingKeysKernel", ctx.node);
    size_t temp_bytes = l.temp_bytes;
    check(cub::DeviceRadixSort::SortPairs(ws + l.temp, temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                          static_cast<int>(count), 0, keyBits(rows), ctx.stream),
          "cub::DeviceRadixSort::SortPairs", ctx.node);
    embeddingRunsKernel<<<gridFor(count), kThreads, 0, ctx.stream>>>(keys_out, first, last, count, rows);
    checkLaunch("embeddingRunsKernel", ctx.node);
  }
  dispatchFloating(in[0].dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    embeddingGradKernel<T>
        <<<gridFor(rows * dim), kThreads, 0, ctx.stream>>>(in[0].as<T>(), vals_out, first, last, out[0].as<T>(), rows,
                                                           dim, n.i("padding_idx"), n.i("scale_grad_by_freq") != 0);
    checkLaunch("embeddingGradKernel", ctx.node);
  });
}

// ---- embedding_backward_rows (g, indices) -> rows i64[K], values [K, dim] -------------
// The row-sparse gradient (core/ops/row_sparse.cpp): the positions keyed by
// their index (padding_idx and out-of-range indices left out, the latter
// also raising the fault flag) and coalesced (row_coalesce.h), each row's
// positions summed in index order from +0 as the CPU kernel sums them.

RowCoalesceLayout embeddingRowsLayout(const Node& n) {
  const int64_t count = n.input(1)->type().numel();
  return rowCoalesceLayout(count, n.i("num_weights"), count);
}

size_t embeddingBackwardRowsWorkspace(const Node& n) {
  return embeddingRowsLayout(n).total;
}

bool embeddingBackwardRowsSupports(const Node& n) {
  const DType t = n.input(0)->dtype();
  return (t == DType::F32 || t == DType::F64) && integralDType(n.input(1)->dtype()) &&
         n.input(1)->type().numel() < (int64_t{1} << 31) && n.i("num_weights") < (int64_t{1} << 31) - 1;
}

void embeddingBackwardRowsKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                                 CudaContext& ctx) {
  const RowCoalesceLayout l = embeddingRowsLayout(n);
  void* ws = requireWorkspace(ctx, l.total);
  if (l.sources > 0) {
    embeddingKeysKernel<<<gridFor(l.sources), kThreads, 0, ctx.stream>>>(
        indexOf(in[1], n), coalesceKeys(ws, l), nullptr, l.sources, l.bound, n.i("padding_idx"), ctx.error_flag,
        ctx.node_index);
    checkLaunch("embeddingKeysKernel", ctx.node);
  }
  enqueueRowCoalesce(ws, l, in[0].data, in[0].dtype(), out[1].shape()[1], out[0].as<int64_t>(), out[1].data, ctx.stream,
                     ctx.node);
}

// ---- rows_to_dense (rows, values) -> [num_rows, dim] ---------------------------
// Zeros, then each listed row's values copied to its place (any dtype, as
// elements of its size). Rows out of range, out of order or after the -1
// padding raise the fault flag and are not written (the CPU kernel fails on
// the first two; a row after the padding is malformed either way).

template <class E>
__global__ void __launch_bounds__(kThreads)
    rowsToDenseKernel(const int64_t* __restrict__ rows, const E* __restrict__ values, E* __restrict__ out,
                      int64_t capacity, int64_t dim, int64_t num_rows, int* flag, uint64_t node) {
  const int64_t total = capacity * dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = idx / dim, d = idx % dim;
    const int64_t r = rows[j];
    if (r < 0) continue;
    if (r >= num_rows || (j > 0 && (rows[j - 1] < 0 || rows[j - 1] >= r))) {
      if (d == 0) raiseError(flag, node);
      continue;
    }
    out[r * dim + d] = values[idx];
  }
}

void rowsToDenseKernelFn(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                         CudaContext& ctx) {
  check(cudaMemsetAsync(out[0].data, 0, out[0].bytes(), ctx.stream), "cudaMemsetAsync", ctx.node);
  const int64_t capacity = in[0].numel(), dim = in[1].shape()[1];
  if (capacity * dim == 0) return;
  dispatchBySize(dtypeSize(in[1].dtype()), &n, [&](auto tag) {
    using E = decltype(tag);
    rowsToDenseKernel<E><<<gridFor(capacity * dim), kThreads, 0, ctx.stream>>>(
        in[0].as<int64_t>(), in[1].as<E>(), out[0].as<E>(), capacity, dim, n.i("num_rows"), ctx.error_flag,
        ctx.node_index);
    checkLaunch("rowsToDenseKernel", ctx.node);
  });
}

}  // namespace

void registerCudaEmbeddingKernels(CudaKernelRegistry& r) {
  r.add(ownCudaKernel("embedding", embeddingKernelFn, nullptr, embeddingSupports));
  r.add(ownCudaKernel("embedding_backward", embeddingBackwardKernel, embeddingBackwardWorkspace,
                      embeddingBackwardSupports));
  r.add(ownCudaKernel("embedding_backward_rows", embeddingBackwardRowsKernel, embeddingBackwardRowsWorkspace,
                      embeddingBackwardRowsSupports));
  r.add(ownCudaKernel("rows_to_dense", rowsToDenseKernelFn));
}

}  // namespace kiln::cuda
