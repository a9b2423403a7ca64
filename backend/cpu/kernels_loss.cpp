// CPU kernels for the loss family ("cpu"; f32/f64 natively, f16/bf16
// in f32): cross_entropy and nll_loss over class-index targets, mse_loss
// with broadcasting. Class losses view the input as [N, C, inner] (a 1-D
// input is one sample with a scalar target) and follow PyTorch exactly:
// targets equal to ignore_index contribute 0 and are not counted by "mean"
// (all ignored gives 0/0 = nan), and label smoothing s gives
//   (1 - s) * nll + s / C * sum_k(-log p_k)   per non-ignored target.
// Targets are validated before any arithmetic so a bad one fails with a
// message naming it. Sums accumulate in double. cross_entropy {dtype=f32}
// over bf16 logits reads them widened in its row loops (no f32 copy).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/float_kernel.h"
#include "backend/cpu/row_math.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

enum class Reduction { None, Mean, Sum };

Reduction reductionOf(const Node& n) {
  const std::string& r = n.s("reduction");
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  if (r == "mean") return Reduction::Mean;
  opFail(n, "unknown reduction \"" + r + "\"");
}

/// Class-loss geometry: input [batch, classes, inner], target [batch, inner].
struct ClassGeom {
  int64_t batch, classes, inner;
};

ClassGeom classGeom(const Shape& x) {
  if (x.size() == 1) return {1, x[0], 1};
  return {x[0], x[1], numelOf(Shape(x.begin() + 2, x.end()))};
}

/// Targets as int64, each checked to be a class index or ignore_index.
Tensor checkedTargets(const Node& n, const Tensor& target, int64_t classes, int64_t ignore_index) {
  Tensor t = target.dtype() == DType::I64 ? target : target.to(DType::I64);
  const int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] != ignore_index && (p[i] < 0 || p[i] >= classes))
      opFail(n, "target " + std::to_string(p[i]) + " at position " + std::to_string(i) + " is out of range for " +
                    std::to_string(classes) + " classes (valid: 0.." + std::to_string(classes - 1) +
                    ", or ignore_index " + std::to_string(ignore_index) + ")");
  return t;
}

/// log(sum_k exp(x[k * stride])) over n values, max-shifted (an all -inf
/// row shifts by 0). Contiguous f32 rows take the vectorized row loops;
/// the rest sum exp in double.
template <typename T>
double logSumExp(const T* x, int64_t n, int64_t stride) {
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 1) {
      const float shift = softmaxShift(rowMaxF32(x, n));
      return std::log(rowSumExpF32(x, n, shift)) + shift;
    }
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    if (stride == 1) {  // the f32 loops over the row widened in a per-thread buffer
      thread_local std::vector<float> row;
      row.resize(static_cast<size_t>(n));
      rowFromBf16(x, row.data(), n);
      return logSumExp(row.data(), n, 1);
    }
  }
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < n; ++k) mx = std::max<double>(mx, static_cast<compute_t<T>>(x[k * stride]));
  if (std::isinf(mx) && mx < 0) mx = 0;
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += std::exp(static_cast<compute_t<T>>(x[k * stride]) - mx);
  return std::log(sum) + mx;
}

/// Shared by cross_entropy (kLogits: apply log_softmax over the class dim
/// first, allow label smoothing) and nll_loss (input already log-probs).
/// T: the result's type; In: the input's (bf16 read widened, for T = float).
template <typename T, bool kLogits, typename In = T>
void classLossImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ClassGeom g = classGeom(in[0].shape());
  const int64_t ignore = n.i("ignore_index");
  const double smoothing = kLogits ? n.f("label_smoothing") : 0.0;
  const Reduction red = reductionOf(n);
  Tensor targets = checkedTargets(n, in[1], g.classes, ignore);
  const int64_t* tgt = targets.data<int64_t>();
  const In* x = in[0].data<In>();
  const int64_t count = g.batch * g.inner;
  std::vector<double> loss(static_cast<size_t>(count));
#pragma omp parallel for collapse(2) if (count * g.classes > kOmpMinWork)
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.inner; ++i) {
      const int64_t e = b * g.inner + i;
      if (tgt[e] == ignore) {
        loss[static_cast<size_t>(e)] = 0;
        continue;
      }
      const In* src = x + b * g.classes * g.inner + i;
      const double lse = kLogits ? logSumExp(src, g.classes, g.inner) : 0.0;
      double l = -(static_cast<T>(src[tgt[e] * g.inner]) - lse);
      if (smoothing > 0) {
        double neg_sum = 0;  // sum_k -log p_k
        for (int64_t k = 0; k < g.classes; ++k) neg_sum -= static_cast<T>(src[k * g.inner]) - lse;
        l = (1 - smoothing) * l + smoothing / static_cast<double>(g.classes) * neg_sum;
      }
      loss[static_cast<size_t>(e)] = l;
    }
  Tensor& y = allocAs(n, out, 0, dtypeOf<T>());
  T* yp = y.data<T>();
  if (red == Reduction::None) {
    for (int64_t e = 0; e < count; ++e) yp[e] = static_cast<T>(loss[static_cast<size_t>(e)]);
    return;
  }
  double total = 0;
  int64_t counted = 0;
  for (int64_t e = 0; e < count; ++e) {
    total += loss[static_cast<size_t>(e)];
    counted += tgt[e] != ignore;
  }
  yp[0] = static_cast<T>(red == Reduction::Sum ? total : total / static_cast<double>(counted));
}

void crossEntropyKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { classLossImpl<decltype(t), true>(n, in, out); });
}
/// cross_entropy {dtype=f32} over bf16 logits, read in place.
void crossEntropyBf16Kernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  classLossImpl<float, true, BFloat16>(n, in, out);
}
bool bf16LogitsF32Loss(const Node& n) {
  return n.input(0)->dtype() == DType::BF16 && n.output()->dtype() == DType::F32;
}
void nllLossKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { classLossImpl<decltype(t), false>(n, in, out); });
}

/// Element offsets of a tensor of shape `s` broadcast against `out`.
std::vector<int64_t> broadcastStrides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != 1) st[out.size() - s.size() + i] = acc;
    acc *= s[i];
  }
  return st;
}

template <typename T>
void mseImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Shape shape = broadcastShapes(n, in[0].shape(), in[1].shape());
  const int64_t count = numelOf(shape);
  const T* a = in[0].data<T>();
  const T* b = in[1].data<T>();
  const Reduction red = reductionOf(n);
  Tensor& y = allocAs(n, out, 0, in[0].dtype());
  T* yp = y.data<T>();
  auto sq = [](T u, T v) { return (u - v) * (u - v); };
  if (in[0].shape() == in[1].shape()) {
    if (red == Reduction::None) {
#pragma omp parallel for if (count > 65536)
      for (int64_t i = 0; i < count; ++i) yp[i] = sq(a[i], b[i]);
      return;
    }
    const double total = blockedSum(count, [&](int64_t i) { return static_cast<double>(sq(a[i], b[i])); });
    yp[0] = static_cast<T>(red == Reduction::Sum ? total : total / static_cast<double>(count));
    return;
  }
  // Broadcast: walk the output index with an odometer.
  const std::vector<int64_t> sa = broadcastStrides(in[0].shape(), shape), sb = broadcastStrides(in[1].shape(), shape);
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t oa = 0, ob = 0;
  double total = 0;
  for (int64_t i = 0; i < count; ++i) {
    const T v = sq(a[oa], b[ob]);
    if (red == Reduction::None)
      yp[i] = v;
    else
      total += v;
    for (size_t d = shape.size(); d-- > 0;) {
      oa += sa[d], ob += sb[d];
      if (++idx[d] < shape[d]) break;
      oa -= sa[d] * shape[d], ob -= sb[d] * shape[d];
      idx[d] = 0;
    }
  }
  if (red != Reduction::None)
    yp[0] = static_cast<T>(red == Reduction::Sum ? total : total / static_cast<double>(count));
}

void mseKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { mseImpl<decltype(t)>(n, in, out); });
}

bool floatInput(const Node& n) {
  return isFloating(n.input(0)->dtype());
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuLossKernels(KernelRegistry& r) {
  using namespace cpu;
  r.add({"cross_entropy", "cpu", "cpu.cross_entropy", 0, floatInput, viaComputeType<crossEntropyKernel>});
  r.add({"cross_entropy", "cpu", "cpu.cross_entropy_bf16", 10, bf16LogitsF32Loss, crossEntropyBf16Kernel});
  r.add({"nll_loss", "cpu", "cpu.nll_loss", 0, floatInput, viaComputeType<nllLossKernel>});
  r.add({"mse_loss", "cpu", "cpu.mse_loss", 0, floatInput, viaComputeType<mseKernel>});
}

}  // namespace kiln
