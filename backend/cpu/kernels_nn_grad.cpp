// CPU kernels of the nn family's backward ops (core/ops/nn_grad.cpp). The
// conv and pool ones live in kernels_conv_grad.cpp and kernels_pool_grad.cpp;
// this file registers them and holds embedding_backward ("cpu").
//
// embedding_backward accumulates rows in index order, with each thread owning
// a slice of the embedding dim, so the result is deterministic and free of
// races whatever the thread count (duplicate indices are the norm: tokens
// repeat).
#include <algorithm>
#include <vector>

#include <omp.h>

#include "backend/cpu/float_kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {

void registerCpuConvGradKernels(KernelRegistry& r);
void registerCpuPoolGradKernels(KernelRegistry& r);

namespace {

template <typename T, typename I>
void embeddingBackwardImpl(const Node& n, const Tensor& gt, const Tensor& idx, Tensor& out) {
  const int64_t rows = out.shape()[0], dim = out.shape()[1], count = idx.numel();
  const int64_t pad = n.i("padding_idx");
  const I* ids = idx.data<I>();
  for (int64_t i = 0; i < count; ++i) {
    const auto id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= rows)
      opFail(n, "index " + std::to_string(id) + " at position " + std::to_string(i) +
                    " is out of range for an embedding with " + std::to_string(rows) + " rows");
  }
  // scale_grad_by_freq: PyTorch counts every occurrence (padding_idx's too)
  // and adds grad * T(1.0 / count) to the row.
  std::vector<int64_t> counts;
  if (n.i("scale_grad_by_freq")) {
    counts.assign(static_cast<size_t>(rows), 0);
    for (int64_t i = 0; i < count; ++i) ++counts[static_cast<size_t>(ids[i])];
  }
  const T* g = gt.data<T>();
  T* w = out.data<T>();
  std::fill(w, w + out.numel(), T(0));
  // Threads split the embedding dim (at least 64 columns each) and walk all
  // indices in order.
  const int64_t work = count * dim;
  const int threads = work > 65536 ? static_cast<int>(std::min<int64_t>(omp_get_max_threads(), (dim + 63) / 64)) : 1;
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t d0 = dim * t / nt, d1 = dim * (t + 1) / nt;
    for (int64_t i = 0; i < count; ++i) {
      const auto id = static_cast<int64_t>(ids[i]);
      if (id == pad) continue;
      const T* src = g + i * dim;
      T* dst = w + id * dim;
      if (counts.empty()) {
        for (int64_t d = d0; d < d1; ++d) dst[d] += src[d];
      } else {
        const T scale = static_cast<T>(1.0 / static_cast<double>(counts[static_cast<size_t>(id)]));
        for (int64_t d = d0; d < d1; ++d) dst[d] += scale * src[d];
      }
    }
  }
}

template <typename T>
void embeddingBackwardTyped(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  Tensor& w = allocAs(n, out, 0, in[0].dtype());
  switch (in[1].dtype()) {
    case DType::I64:
      return embeddingBackwardImpl<T, int64_t>(n, in[0], in[1], w);
    case DType::I32:
      return embeddingBackwardImpl<T, int32_t>(n, in[0], in[1], w);
    case DType::I16:
      return embeddingBackwardImpl<T, int16_t>(n, in[0], in[1], w);
    case DType::I8:
      return embeddingBackwardImpl<T, int8_t>(n, in[0], in[1], w);
    case DType::U8:
      return embeddingBackwardImpl<T, uint8_t>(n, in[0], in[1], w);
    default:
      opFail(n, "indices must be integers, got " + in[1].type().str());
  }
}

void embeddingBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { embeddingBackwardTyped<decltype(t)>(n, in, out); });
}

bool floatInput(const Node& n) {
  return isFloating(n.input(0)->dtype());
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuNNGradKernels(KernelRegistry& r) {
  using namespace cpu;
  registerCpuConvGradKernels(r);
  registerCpuPoolGradKernels(r);
  r.add({"embedding_backward", "cpu", "cpu.embedding_backward", 0, floatInput,
         viaComputeType<embeddingBackwardKernel>});
}

}  // namespace kiln
