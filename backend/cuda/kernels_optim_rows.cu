// CUDA kernel of sgd_update_rows (lr, step, grad_scale, p, rows, values)
// {skip_nonfinite} -> p' (core/ops/row_sparse.cpp): plain SGD of the rows a
// row-sparse gradient lists, in place, exactly as the CPU kernel
// (backend/cpu/kernels_row_sparse.cpp) and the dense sgd_update compute it:
// p + (-lr) x (g x scale), each product and sum rounded on its own, in the
// parameter's dtype. Every other row keeps its value, as the dense update
// of a zero gradient row would give, so nothing walks the table... unless
// the scale is not finite (clipping after a NaN or infinite norm): then the
// dense update's 0 x scale is NaN on every row, and a second kernel, which
// returns at once for a finite scale, writes it to the unlisted rows too.
// skip_nonfinite (amp's overflow) skips the step instead. The scalars stay
// on the device (optim_device.cuh); a bad row raises the fault flag.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/optim_device.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kNonFiniteBlocks = 256;  // the unlisted-rows pass: a small grid that returns at once

template <typename T>
struct RowUpdateArgs {
  ScalarRefs s;
  const T* p;
  const int64_t* rows;
  const T* values;
  T* out;
  int64_t capacity, num_rows, dim;
  bool skip_nonfinite;
};

template <typename T>
__device__ __forceinline__ bool skipped(const RowUpdateArgs<T>& a, double gs) {
  return a.skip_nonfinite && !isfinite(gs);
}

/// A thread per (listed row, column).
template <typename T>
__global__ void __launch_bounds__(kThreads) sgdRowsKernel(const RowUpdateArgs<T> a, int* flag, uint64_t node) {
  const double gs = loadScalar(a.s.p[2], a.s.dtype[2]);
  if (skipped(a, gs)) return;
  const T neg_lr = static_cast<T>(-loadScalar(a.s.p[0], a.s.dtype[0])), scale = static_cast<T>(gs);
  const int64_t total = a.capacity * a.dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = idx / a.dim, d = idx % a.dim;
    const int64_t r = a.rows[j];
    if (r < 0) continue;
    if (r >= a.num_rows || (j > 0 && (a.rows[j - 1] < 0 || a.rows[j - 1] >= r))) {
      if (d == 0) raiseError(flag, node);
      continue;
    }
    const int64_t at = r * a.dim + d;
    a.out[at] = kadd(a.p[at], kmul(neg_lr, kmul(a.values[idx], scale)));  // param.add_(d_p, alpha=-lr)
  }
}

/// Whether row r is listed: a binary search of the ascending rows, the -1
/// padding after them counted as past every row.
__device__ __forceinline__ bool listed(const int64_t* rows, int64_t capacity, int64_t r) {
  int64_t lo = 0, hi = capacity;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    const int64_t v = rows[mid] < 0 ? INT64_MAX : rows[mid];
    if (v < r)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < capacity && rows[lo] == r;
}

/// With a non-finite scale: the unlisted rows get the dense update's
/// p + (-lr) x (0 x scale) (NaN). With a finite one, nothing.
template <typename T>
__global__ void __launch_bounds__(kThreads) sgdUnlistedRowsKernel(const RowUpdateArgs<T> a) {
  const double gs = loadScalar(a.s.p[2], a.s.dtype[2]);
  const T scale = static_cast<T>(gs);  // finite as a double, it may still overflow T (as on the CPU)
  if (isfinite(scale) || skipped(a, gs)) return;
  const T neg_lr = static_cast<T>(-loadScalar(a.s.p[0], a.s.dtype[0]));
  const T step = kmul(neg_lr, kmul(T(0), scale));
  const int64_t total = a.num_rows * a.dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!listed(a.rows, a.capacity, idx / a.dim)) a.out[idx] = kadd(a.out[idx], step);
}

bool supports(const Node& n) {
  const DType t = n.input(3)->dtype();
  return t == DType::F32 || t == DType::F64;
}

void sgdUpdateRows(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                   CudaContext& ctx) {
  const DeviceTensor& p = in[3];
  // Bound to the parameter's own buffer (the executor donates it), the
  // other rows are already right; else they are copied first.
  if (out[0].data != p.data)
    check(cudaMemcpyAsync(out[0].data, p.data, p.bytes(), cudaMemcpyDeviceToDevice, ctx.stream),
          "copying the rows sgd_update_rows leaves alone", ctx.node);
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    const RowUpdateArgs<T> a{scalarRefs(in), p.as<T>(),      in[4].as<int64_t>(),
                             in[5].as<T>(),  out[0].as<T>(), in[4].numel(),
                             p.shape()[0],   p.shape()[1],   n.i("skip_nonfinite") != 0};
    if (a.capacity * a.dim > 0) {
      sgdRowsKernel<T><<<gridFor(a.capacity * a.dim), kThreads, 0, ctx.stream>>>(a, ctx.error_flag, ctx.node_index);
      checkLaunch("sgdRowsKernel", ctx.node);
    }
    if (a.num_rows * a.dim > 0) {
      sgdUnlistedRowsKernel<T><<<kNonFiniteBlocks, kThreads, 0, ctx.stream>>>(a);
      checkLaunch("sgdUnlistedRowsKernel", ctx.node);
    }
  };
  if (p.dtype() == DType::F64)
    launch(double{});
  else
    launch(float{});
}

}  // namespace

void registerCudaRowUpdateKernels(CudaKernelRegistry& r) {
  // In place: each listed element of p is read before the same element of
  // p' is written, by the same thread.
  CudaKernelDef k = ownCudaKernel("sgd_update_rows", sgdUpdateRows, nullptr, supports);
  k.updates_in_place = true;
  r.add(std::move(k));
}

}  // namespace kiln::cuda
