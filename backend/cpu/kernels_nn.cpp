// CPU kernels for the nn family. Convolution, pooling and normalization
// live in kernels_conv.cpp, kernels_pool.cpp and kernels_norm.cpp; this file
// registers them and holds the rest: embedding, dropout, softmax and
// log_softmax ("cpu").
//
// Dropout draws from a counter-based generator (a SplitMix64 finalizer over
// seed, node index and element index), so the mask depends only on the run
// seed and the node, not on thread count or scheduling.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/float_kernel.h"
#include "backend/cpu/row_math.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

// ---- embedding -----------------------------------------------------------------

template <typename I>
void gatherRows(const Node& n, const Tensor& weight, const Tensor& idx, Tensor& out) {
  const int64_t rows = weight.shape()[0];
  const size_t row_bytes = static_cast<size_t>(weight.shape()[1]) * dtypeSize(weight.dtype());
  const I* ids = idx.data<I>();
  const int64_t count = idx.numel();
  // Check every index first: a clear error instead of a partly written output.
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= rows)
      opFail(n, "index " + std::to_string(id) + " at position " + std::to_string(i) +
                    " is out of range for an embedding with " + std::to_string(rows) + " rows");
  }
  const auto* src = static_cast<const unsigned char*>(weight.raw());
  auto* dst = static_cast<unsigned char*>(out.raw());
#pragma omp parallel for if (count * static_cast <int64_t>(row_bytes) > 262144)
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(ids[i]) * row_bytes, row_bytes);
}

/// Copies rows as raw bytes, so it serves every weight dtype unchanged.
void embeddingKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  Tensor& y = allocOutput(n, out, 0);
  switch (in[1].dtype()) {
    case DType::I64:
      return gatherRows<int64_t>(n, in[0], in[1], y);
    case DType::I32:
      return gatherRows<int32_t>(n, in[0], in[1], y);
    case DType::I16:
      return gatherRows<int16_t>(n, in[0], in[1], y);
    case DType::I8:
      return gatherRows<int8_t>(n, in[0], in[1], y);
    case DType::U8:
      return gatherRows<uint8_t>(n, in[0], in[1], y);
    default:
      opFail(n, "indices must be integers, got " + in[1].type().str());
  }
}

// ---- dropout -------------------------------------------------------------------

inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename T>
void dropoutImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, const KernelContext& ctx) {
  const T* x = in[0].data<T>();
  T* y = allocAs(n, out, 0, in[0].dtype()).template data<T>();
  const int64_t count = in[0].numel();
  if (!n.i("training")) {
    std::copy(x, x + count, y);
    return;
  }
  const double p = n.f("p");
  auto* mask = allocOutput(n, out, 1).data<uint8_t>();
  // Kept values are scaled by 1/(1-p); p = 1 drops everything (no inf scale).
  // Each value is multiplied by its factor (PyTorch's x * noise, so a dropped
  // inf or NaN is NaN, as 0 * inf is), not selected.
  const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  const uint64_t key = splitmix64(ctx.seed ^ splitmix64(ctx.node_index + 0x632BE59BD9B4E019ull));
#pragma omp parallel for if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    // 53 random bits -> uniform in [0, 1); keep when u >= p.
    const double u = static_cast<double>(splitmix64(key + static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53;
    const bool keep = u >= p;
    mask[i] = keep;
    y[i] = x[i] * (keep ? scale : T(0));
  }
}

void dropoutKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext& ctx) {
  dispatchFloat(in[0].dtype(), [&](auto t) { dropoutImpl<decltype(t)>(n, in, out, ctx); });
}

// ---- softmax / log_softmax -----------------------------------------------------------

/// Softmax along `dim`, viewed as [outer, size, inner]. Subtracting the max
/// keeps exp() in range; sums accumulate in double.
template <typename T, bool kLog>
void softmaxImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Shape& s = in[0].shape();
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t dim = rank == 0 ? 0 : normalizeAxis(n.i("dim"), rank);
  const int64_t size = rank == 0 ? 1 : s[static_cast<size_t>(dim)];
  const int64_t inner = rank == 0 ? 1 : numelOf(Shape(s.begin() + dim + 1, s.end()));
  const int64_t outer = size * inner != 0 ? in[0].numel() / (size * inner) : 0;
  const T* x = in[0].data<T>();
  T* y = allocAs(n, out, 0, in[0].dtype()).template data<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (inner == 1) {  // softmax over contiguous rows (the usual last dim): vectorized row loops
#pragma omp parallel for if (outer * size > kOmpMinWork)
      for (int64_t o = 0; o < outer; ++o) {
        const float* src = x + o * size;
        float* dst = y + o * size;
        const float shift = softmaxShift(rowMaxF32(src, size));
        if constexpr (kLog) {
          const float lse = static_cast<float>(std::log(rowSumExpF32(src, size, shift))) + shift;
          for (int64_t k = 0; k < size; ++k) dst[k] = src[k] - lse;
        } else {
          rowAffineF32(dst, size, static_cast<float>(1.0 / rowExpF32(src, dst, size, shift)), 0.0f);
        }
      }
      return;
    }
  }
#pragma omp parallel for collapse(2) if (outer * inner * size > kOmpMinWork)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T* src = x + o * size * inner + i;
      T* dst = y + o * size * inner + i;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t k = 0; k < size; ++k) mx = std::max(mx, src[k * inner]);
      if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf: avoid (-inf) - (-inf)
      double sum = 0;
      if constexpr (kLog) {
        for (int64_t k = 0; k < size; ++k) sum += std::exp(static_cast<double>(src[k * inner] - mx));
        const T lse = static_cast<T>(std::log(sum)) + mx;
        for (int64_t k = 0; k < size; ++k) dst[k * inner] = src[k * inner] - lse;
      } else {
        for (int64_t k = 0; k < size; ++k) {
          const T e = std::exp(src[k * inner] - mx);
          dst[k * inner] = e;
          sum += e;
        }
        const T inv = static_cast<T>(1.0 / sum);
        for (int64_t k = 0; k < size; ++k) dst[k * inner] *= inv;
      }
    }
}

void softmaxKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { softmaxImpl<decltype(t), false>(n, in, out); });
}
void logSoftmaxKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { softmaxImpl<decltype(t), true>(n, in, out); });
}

bool floatInput(const Node& n) {
  return isFloating(n.input(0)->dtype());
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuNNKernels(KernelRegistry& r) {
  using namespace cpu;
  registerCpuConvKernels(r);
  registerCpuPoolKernels(r);
  registerCpuNormKernels(r);
  registerCpuAttentionKernels(r);
  r.add({"embedding", "cpu", "cpu.embedding", 0, nullptr, embeddingKernel});
  r.add({"dropout", "cpu", "cpu.dropout", 0, floatInput, viaComputeType<dropoutKernel>});
  r.add({"softmax", "cpu", "cpu.softmax", 0, nullptr, viaComputeType<softmaxKernel>});
  r.add({"log_softmax", "cpu", "cpu.log_softmax", 0, nullptr, viaComputeType<logSoftmaxKernel>});
}

}  // namespace kiln
