// The CUDA kernel of dropout {p, training} (core/ops/nn.cpp): the CPU
// reference's masks bit for bit (backend/cpu/kernels_nn.cpp), drawn from the
// run's seed, which the kernel reads from device memory (a captured CUDA
// graph replays with the next step's seed).
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
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

// ---- dropout -------------------------------------------------------------------
// The CPU's counter-based mask (backend/cpu/kernels_nn.cpp): key =
// splitmix64(seed ^ splitmix64(node_index + 0x632BE59BD9B4E019)), element i
// kept when (splitmix64(key + i) >> 11) * 2^-53 >= p, kept values scaled by
// 1 / (1 - p) (0 when p = 1), every value multiplied by its factor. The seed is read on the device, so a captured
// graph replays with each run's seed.

template <class T>
__global__ void __launch_bounds__(kThreads)
    dropoutKernel(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64_t count, double p,
                  Cmp<T> scale, const uint64_t* __restrict__ run_seed, uint64_t node_index) {
  using C = Cmp<T>;
  const uint64_t key = splitmix64(*run_seed ^ splitmix64(node_index + 0x632BE59BD9B4E019ull));
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double u = static_cast<double>(splitmix64(key + static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53;
    const bool keep = u >= p;
    mask[i] = keep;
    y[i] = store<T>(load<C>(x[i]) * (keep ? scale : C(0)));  // x * noise: a dropped inf is NaN
  }
}

bool dropoutSupports(const Node& n) {
  return isFloating(n.input(0)->dtype());
}

void dropoutKernelFn(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  const int64_t count = in[0].numel();
  if (count == 0) return;
  if (!n.i("training")) {
    check(cudaMemcpyAsync(out[0].data, in[0].data, in[0].bytes(), cudaMemcpyDeviceToDevice, ctx.stream),
          "cudaMemcpyAsync", ctx.node);
    return;
  }
  const double p = n.f("p");
  dispatchFloating(in[0].dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = Cmp<T>;
    const C scale = p < 1 ? static_cast<C>(1.0 / (1.0 - p)) : C(0);
    dropoutKernel<T><<<gridFor(count), kThreads, 0, ctx.stream>>>(in[0].as<T>(), out[0].as<T>(), out[1].as<bool>(),
                                                                  count, p, scale, ctx.run_seed, ctx.node_index);
    checkLaunch("dropoutKernel", ctx.node);
  });
}

}  // namespace

void registerCudaDropoutKernels(CudaKernelRegistry& r) {
  r.add(ownCudaKernel("dropout", dropoutKernelFn, nullptr, dropoutSupports));
}

}  // namespace kiln::cuda
