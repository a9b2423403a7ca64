// CPU kernels of the loss backward ops (core/ops/loss_grad.cpp), "cpu";
// f32/f64 natively, f16/bf16 in f32:
//   cross_entropy_backward(g, logits, target) {reduction, ignore_index, label_smoothing}
//   nll_loss_backward(g, target) {reduction, ignore_index, num_classes}
// Inputs are viewed as [batch, classes, inner] (a 1-D input is one sample
// with a 0-d target), as the forward kernels do. For each target e that is
// not ignore_index, with scale = g / M ("mean", M = targets not ignored),
// g ("sum") or g[e] ("none"):
//   cross_entropy: grad[k] = scale * (p_k - s / C - (1 - s) * [k == t_e])
//   nll_loss:      grad[t_e] = -scale, 0 elsewhere
// and ignored targets get zero rows (so all ignored under "mean" gives
// zeros, not 0 * inf). Targets are validated first, as in the forward.
// An f32 g over bf16 logits (the backward of cross_entropy {dtype=f32})
// reads them widened and rounds each f32 result once to bf16, as the f32
// kernel and a cast after it did.
#include <algorithm>
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

/// Per-target gradient scale: g[e] for "none", else g / M or g.
struct LossScale {
  bool per_element = false;
  double shared = 0;

  template <typename T>
  LossScale(const Node& n, const T* g, const int64_t* tgt, int64_t count, int64_t ignore) {
    const std::string& r = n.s("reduction");
    if (r == "none") {
      per_element = true;
    } else if (r == "sum") {
      shared = g[0];
    } else if (r == "mean") {
      int64_t kept = 0;
      for (int64_t e = 0; e < count; ++e) kept += tgt[e] != ignore;
      shared = static_cast<double>(g[0]) / static_cast<double>(kept);  // kept = 0: unused (all rows zero)
    } else {
      opFail(n, "reduction must be \"mean\", \"sum\" or \"none\", got \"" + r + "\"");
    }
  }
  template <typename T>
  double at(const T* g, int64_t e) const {
    return per_element ? static_cast<double>(g[e]) : shared;
  }
};

/// T: g's type, the one computed in; In: the logits' and the result's (bf16
/// with T = float: read widened, each result rounded once).
template <typename T, typename In = T>
void crossEntropyBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ClassGeom geo = classGeom(in[1].shape());
  const int64_t ignore = n.i("ignore_index"), count = geo.batch * geo.inner;
  const double smoothing = n.f("label_smoothing");
  const double uniform = geo.classes ? smoothing / static_cast<double>(geo.classes) : 0.0;
  Tensor targets = checkedTargets(n, in[2], geo.classes, ignore);
  const int64_t* tgt = targets.data<int64_t>();
  const T* g = in[0].data<T>();
  const In* x = in[1].data<In>();
  const LossScale scale(n, g, tgt, count, ignore);
  In* gx = allocAs(n, out, 0, dtypeOf<In>()).template data<In>();
#pragma omp parallel for collapse(2) if (count * geo.classes > kOmpMinWork)
  for (int64_t b = 0; b < geo.batch; ++b)
    for (int64_t i = 0; i < geo.inner; ++i) {
      const int64_t e = b * geo.inner + i;
      const In* src = x + b * geo.classes * geo.inner + i;
      In* dst = gx + b * geo.classes * geo.inner + i;
      if (tgt[e] == ignore) {
        for (int64_t k = 0; k < geo.classes; ++k) dst[k * geo.inner] = In(0.0f);
        continue;
      }
      const double s = scale.at(g, e);
      if constexpr (std::is_same_v<T, float>) {
        if (geo.inner == 1) {  // contiguous rows: vectorized exp, then one affine pass
          // f32 rows are written straight into dst; bf16 rows widen into a
          // per-thread buffer (in cache) and are rounded once at the end.
          float* row = nullptr;
          const float* from = nullptr;
          if constexpr (std::is_same_v<In, float>) {
            row = dst;
            from = src;
          } else {
            thread_local std::vector<float> widened;
            widened.resize(static_cast<size_t>(geo.classes));
            row = widened.data();
            rowFromBf16(src, row, geo.classes);
            from = row;
          }
          const double inv = 1.0 / rowExpF32(from, row, geo.classes, softmaxShift(rowMaxF32(from, geo.classes)));
          rowAffineF32(row, geo.classes, static_cast<float>(s * inv), static_cast<float>(-s * uniform));
          row[tgt[e]] = static_cast<float>(row[tgt[e]] - s * (1.0 - smoothing));
          if constexpr (!std::is_same_v<In, float>) rowToBf16(row, dst, geo.classes);
          continue;
        }
      }
      // Softmax as the forward computes it: max-shifted, sums in double.
      auto at = [&](int64_t k) { return static_cast<double>(static_cast<T>(src[k * geo.inner])); };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < geo.classes; ++k) mx = std::max(mx, at(k));
      if (std::isinf(mx) && mx < 0) mx = 0;
      double sum = 0;
      for (int64_t k = 0; k < geo.classes; ++k) sum += std::exp(at(k) - mx);
      const double inv = 1.0 / sum;
      for (int64_t k = 0; k < geo.classes; ++k) {
        const double p = std::exp(at(k) - mx) * inv;
        const double target_mass = k == tgt[e] ? 1.0 - smoothing : 0.0;
        dst[k * geo.inner] = static_cast<In>(static_cast<T>(s * (p - uniform - target_mass)));
      }
    }
}

template <typename T>
void nllLossBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  Tensor& gt = allocAs(n, out, 0, in[0].dtype());
  const ClassGeom geo = classGeom(gt.shape());
  const int64_t ignore = n.i("ignore_index"), count = geo.batch * geo.inner;
  Tensor targets = checkedTargets(n, in[1], geo.classes, ignore);
  const int64_t* tgt = targets.data<int64_t>();
  const T* g = in[0].data<T>();
  const LossScale scale(n, g, tgt, count, ignore);
  T* gx = gt.template data<T>();
  std::fill(gx, gx + gt.numel(), T(0));
  for (int64_t b = 0; b < geo.batch; ++b)
    for (int64_t i = 0; i < geo.inner; ++i) {
      const int64_t e = b * geo.inner + i;
      if (tgt[e] != ignore) gx[(b * geo.classes + tgt[e]) * geo.inner + i] = static_cast<T>(-scale.at(g, e));
    }
}

void crossEntropyBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[1].dtype(), [&](auto t) { crossEntropyBackwardImpl<decltype(t)>(n, in, out); });
}
/// f32 g over bf16 logits: read in place, written as bf16.
void crossEntropyBackwardBf16Kernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out,
                                    KernelContext&) {
  crossEntropyBackwardImpl<float, BFloat16>(n, in, out);
}
bool f32GradBf16Logits(const Node& n) {
  return n.input(0)->dtype() == DType::F32 && n.input(1)->dtype() == DType::BF16;
}
void nllLossBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { nllLossBackwardImpl<decltype(t)>(n, in, out); });
}

bool floatGrad(const Node& n) {
  return isFloating(n.input(0)->dtype());
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuLossGradKernels(KernelRegistry& r) {
  using namespace cpu;
  r.add({"cross_entropy_backward", "cpu", "cpu.cross_entropy_backward", 0, floatGrad,
         viaComputeType<crossEntropyBackwardKernel, 1>});
  r.add({"cross_entropy_backward", "cpu", "cpu.cross_entropy_backward_bf16", 10, f32GradBf16Logits,
         crossEntropyBackwardBf16Kernel});
  r.add({"nll_loss_backward", "cpu", "cpu.nll_loss_backward", 0, floatGrad,
         viaComputeType<nllLossBackwardKernel>});
}

}  // namespace kiln
