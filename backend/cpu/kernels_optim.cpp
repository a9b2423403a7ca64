// CPU kernels of the optimizer ops (core/ops/optim.cpp). Each mirrors the
// operation order of torch.optim's single-tensor implementation in the
// parameter's dtype, with the hyper-parameters rounded to it where PyTorch's
// scalar arguments are, so that weights after N steps agree with PyTorch to
// rounding. Scalars that PyTorch computes in Python (bias corrections, step
// size) are computed here in double, as Python does.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/float_kernel.h"

namespace kiln {
namespace {

constexpr size_t kScalars = 3;

struct Scalars {
  double lr, step, grad_scale;
};

Scalars readScalars(std::span<const Tensor> in) {
  return {in[0].at(0), in[1].at(0), in[2].at(0)};
}

/// skip_nonfinite (amp's loss scaler): a non-finite grad_scale says a
/// gradient overflowed; the step is skipped by copying each parameter and
/// its state (the inputs after the gradient in a group of `per`) to the
/// group's `out_per` outputs.
bool skipStep(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, const Scalars& s, size_t per,
              size_t out_per) {
  if (!n.i("skip_nonfinite") || std::isfinite(s.grad_scale)) return false;
  for (size_t g = kScalars, k = 0; g < in.size(); g += per, k += out_per) {
    out[k] = in[g].clone();                                                   // the parameter
    for (size_t j = 1; j < out_per; ++j) out[k + j] = in[g + 1 + j].clone();  // its state, after the gradient
  }
  return true;
}

/// How SGD uses its momentum buffer: none, plain, or Nesterov.
enum class Momentum { None, Plain, Nesterov };

/// One contiguous run of the SGD update in place (p and the momentum buffer
/// are read and overwritten), torch.optim's single-tensor arithmetic. The
/// branches are template arguments (kDecay: weight decay is added; kFirst:
/// the first step's buffer is the gradient itself) so the loop vectorizes.
template <typename T, bool kDecay, Momentum kMomentum, bool kFirst>
KILN_SIMD_CLONES void sgdRun(T* p, const T* g, T* buf, int64_t count, T scale, T wd, T momentum, T keep, T neg_lr) {
  for (int64_t i = 0; i < count; ++i) {
    T d = g[i] * scale;
    if constexpr (kDecay) d = d + wd * p[i];  // grad.add(param, alpha=weight_decay)
    if constexpr (kMomentum != Momentum::None) {
      // First step: buf = clone(d_p); later: buf.mul_(momentum).add_(d_p, alpha=1 - dampening).
      T b;
      if constexpr (kFirst)
        b = d;
      else
        b = buf[i] * momentum + keep * d;
      buf[i] = b;
      if constexpr (kMomentum == Momentum::Nesterov)
        d = d + momentum * b;
      else
        d = b;
    }
    p[i] = p[i] + neg_lr * d;  // param.add_(d_p, alpha=-lr)
  }
}

/// sgdRun with the node's options as template arguments.
template <typename T, bool kDecay, Momentum kMomentum>
void sgdRunFirst(bool first, T* p, const T* g, T* buf, int64_t count, T scale, T wd, T momentum, T keep, T neg_lr) {
  if (first)
    sgdRun<T, kDecay, kMomentum, true>(p, g, buf, count, scale, wd, momentum, keep, neg_lr);
  else
    sgdRun<T, kDecay, kMomentum, false>(p, g, buf, count, scale, wd, momentum, keep, neg_lr);
}
template <typename T, bool kDecay>
void sgdRunMomentum(Momentum mk, bool first, T* p, const T* g, T* buf, int64_t count, T scale, T wd, T momentum, T keep,
                    T neg_lr) {
  if (mk == Momentum::None)
    sgdRunFirst<T, kDecay, Momentum::None>(first, p, g, buf, count, scale, wd, momentum, keep, neg_lr);
  else if (mk == Momentum::Plain)
    sgdRunFirst<T, kDecay, Momentum::Plain>(first, p, g, buf, count, scale, wd, momentum, keep, neg_lr);
  else
    sgdRunFirst<T, kDecay, Momentum::Nesterov>(first, p, g, buf, count, scale, wd, momentum, keep, neg_lr);
}

template <typename T>
void sgdGroup(const Node& n, const Scalars& s, const Tensor& p, const Tensor& g, const Tensor* buf, Tensor& p_out,
              Tensor* buf_out) {
  const T momentum = static_cast<T>(n.f("momentum"));
  const T keep = static_cast<T>(1.0 - n.f("dampening"));
  const T wd = static_cast<T>(n.f("weight_decay"));
  const T neg_lr = static_cast<T>(-s.lr);
  const T scale = static_cast<T>(s.grad_scale);
  const bool first = s.step <= 1;
  const Momentum mk = !buf_out ? Momentum::None : n.i("nesterov") != 0 ? Momentum::Nesterov : Momentum::Plain;
  const int64_t count = p.numel();
  const T* pp = p.data<T>();
  const T* gp = g.data<T>();
  T* po = p_out.data<T>();
  const T* bp = buf ? buf->data<T>() : nullptr;
  T* bo = buf_out ? buf_out->data<T>() : nullptr;
  cpu::parallelFor(count, 65536, [&](int64_t b, int64_t e) {
    // Out of place (the executor found no donor): copy, then update the copy.
    if (po != pp) std::copy(pp + b, pp + e, po + b);
    if (bo && bo != bp && !first) std::copy(bp + b, bp + e, bo + b);
    T* pb = po + b;
    T* bb = bo ? bo + b : nullptr;
    if (wd != 0)
      sgdRunMomentum<T, true>(mk, first, pb, gp + b, bb, e - b, scale, wd, momentum, keep, neg_lr);
    else
      sgdRunMomentum<T, false>(mk, first, pb, gp + b, bb, e - b, scale, wd, momentum, keep, neg_lr);
  });
}

/// How the weight decay enters the update.
enum class Decay { None, Coupled, Decoupled };

template <typename T>
struct AdamConsts {
  T scale, decay, twd, tb1, c1, tb2, c2, bias2_sqrt, eps, step_size;
  bool decoupled;
};

/// One contiguous run of the Adam/AdamW update in place (p, m and v are
/// read and overwritten), in PyTorch's order of operations (torch.optim's
/// single-tensor path). Cloned for AVX2 so the loop is 8 floats wide where
/// the CPU has it; the backend builds with -ffp-contract=off, so no clone
/// fuses a multiply and an add PyTorch keeps apart. Vectorizing took three
/// things (without them the loop ran one float at a time: 105 ms for
/// GPT-2-style's 42M parameters): the decay kind as a template argument (no
/// branch), -fno-math-errno (no errno path around sqrt), and in-place
/// operands (four pointers: seven needed more alias checks than GCC makes).
template <typename T, typename G, Decay kDecay>
KILN_SIMD_CLONES void adamRun(T* p, const G* g, T* m, T* v, int64_t count, AdamConsts<T> k) {
  for (int64_t i = 0; i < count; ++i) {
    T grad = static_cast<T>(g[i]) * k.scale;  // a bf16 gradient widened exactly, as its cast to f32
    T param = p[i];
    if constexpr (kDecay == Decay::Decoupled)
      param = param * k.decay;
    else if constexpr (kDecay == Decay::Coupled)
      grad = grad + k.twd * param;                   // grad.add(param, alpha=weight_decay)
    T mi = m[i] * k.tb1 + k.c1 * grad;               // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    T vi = v[i] * k.tb2 + k.c2 * grad * grad;        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    T denom = std::sqrt(vi) / k.bias2_sqrt + k.eps;  // (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    p[i] = param + k.step_size * (mi / denom);       // param.addcdiv_(exp_avg, denom, value=-step_size)
    m[i] = mi;
    v[i] = vi;
  }
}

/// One parameter's update; G is T, or BFloat16 for amp's bf16 gradient of an
/// f32 parameter (adam_update reads it widened: passes/fuse.cpp's cast fold).
template <typename T, typename G = T>
void adamGroup(const Node& n, const Scalars& s, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
               Tensor& p_out, Tensor& m_out, Tensor& v_out) {
  const double b1 = n.f("beta1"), b2 = n.f("beta2"), wd = n.f("weight_decay");
  const bool decoupled = n.i("decoupled") != 0;
  const double bias1 = 1 - std::pow(b1, s.step), bias2 = 1 - std::pow(b2, s.step);
  const T step_size = static_cast<T>(-(s.lr / bias1));
  const T bias2_sqrt = static_cast<T>(std::sqrt(bias2));
  const T decay = static_cast<T>(1 - s.lr * wd);  // AdamW: param.mul_(1 - lr * weight_decay)
  const T tb1 = static_cast<T>(b1), tb2 = static_cast<T>(b2), c1 = static_cast<T>(1 - b1), c2 = static_cast<T>(1 - b2),
          eps = static_cast<T>(n.f("eps")), twd = static_cast<T>(wd), scale = static_cast<T>(s.grad_scale);
  const int64_t count = p.numel();
  const T *pp = p.data<T>(), *mp = m.data<T>(), *vp = v.data<T>();
  const G* gp = g.data<G>();
  T *po = p_out.data<T>(), *mo = m_out.data<T>(), *vo = v_out.data<T>();
  const AdamConsts<T> k{scale, decay, twd, tb1, c1, tb2, c2, bias2_sqrt, eps, step_size, decoupled};
  cpu::parallelFor(count, 65536, [&](int64_t b, int64_t e) {
    // Out of place (the executor found no donor): copy, then update the copy.
    if (po != pp) std::copy(pp + b, pp + e, po + b);
    if (mo != mp) std::copy(mp + b, mp + e, mo + b);
    if (vo != vp) std::copy(vp + b, vp + e, vo + b);
    if (decoupled)
      adamRun<T, G, Decay::Decoupled>(po + b, gp + b, mo + b, vo + b, e - b, k);
    else if (twd != 0)
      adamRun<T, G, Decay::Coupled>(po + b, gp + b, mo + b, vo + b, e - b, k);
    else
      adamRun<T, G, Decay::None>(po + b, gp + b, mo + b, vo + b, e - b, k);
  });
}

void sgdKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  Scalars s = readScalars(in);
  const bool momentum = n.f("momentum") != 0;
  const size_t per = momentum ? 3 : 2, out_per = momentum ? 2 : 1;
  if (skipStep(n, in, out, s, per, out_per)) return;
  for (size_t g = kScalars, k = 0; g < in.size(); g += per, k += out_per) {
    Tensor& p_out = allocOutput(n, out, k);
    Tensor* buf_out = momentum ? &allocOutput(n, out, k + 1) : nullptr;
    const Tensor* buf = momentum ? &in[g + 2] : nullptr;
    cpu::dispatchFloat(in[g].dtype(),
                       [&](auto t) { sgdGroup<decltype(t)>(n, s, in[g], in[g + 1], buf, p_out, buf_out); });
  }
}

void adamKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  Scalars s = readScalars(in);
  if (skipStep(n, in, out, s, 4, 3)) return;
  for (size_t g = kScalars, k = 0; g < in.size(); g += 4, k += 3) {
    Tensor& p_out = allocOutput(n, out, k);
    Tensor& m_out = allocOutput(n, out, k + 1);
    Tensor& v_out = allocOutput(n, out, k + 2);
    if (in[g].dtype() == DType::F32 && in[g + 1].dtype() == DType::BF16) {
      adamGroup<float, cpu::BFloat16>(n, s, in[g], in[g + 1], in[g + 2], in[g + 3], p_out, m_out, v_out);
      continue;
    }
    cpu::dispatchFloat(in[g].dtype(), [&](auto t) {
      adamGroup<decltype(t)>(n, s, in[g], in[g + 1], in[g + 2], in[g + 3], p_out, m_out, v_out);
    });
  }
}

void globalNormKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  double sum = 0;
  for (const Tensor& t : in)
    cpu::dispatchFloat(t.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* p = t.data<T>();
      sum +=
          cpu::blockedSum(t.numel(), [p](int64_t i) { return static_cast<double>(p[i]) * static_cast<double>(p[i]); });
    });
  allocOutput(n, out, 0).set(0, std::sqrt(sum));
}

/// The fast loops handle f32/f64 parameters (others would need a master copy).
bool floatParams(const Node& n) {
  for (size_t i = kScalars; i < n.numInputs(); ++i) {
    DType t = n.input(i)->dtype();
    if (t != DType::F32 && t != DType::F64) return false;
  }
  return true;
}

/// adam_update: f32/f64 groups, where a gradient may also be bf16 beside an
/// f32 parameter (read widened).
bool adamParams(const Node& n) {
  for (size_t g = kScalars; g + 3 < n.numInputs(); g += 4)
    for (size_t k = 0; k < 4; ++k) {
      const DType t = n.input(g + k)->dtype();
      const bool widened = k == 1 && t == DType::BF16 && n.input(g)->dtype() == DType::F32;
      if (t != DType::F32 && t != DType::F64 && !widened) return false;
    }
  return true;
}

bool floatInputs(const Node& n) {
  for (Value* v : n.inputs())
    if (v->dtype() != DType::F32 && v->dtype() != DType::F64) return false;
  return true;
}

}  // namespace

void registerCpuOptimizerKernels(KernelRegistry& r) {
  // In place: sgdGroup and adamRun read every input element before writing
  // the same element of the outputs.
  r.add({"sgd_update", "cpu", "cpu.sgd_update", 0, floatParams, sgdKernel, false, /*updates_in_place=*/true});
  r.add({"adam_update", "cpu", "cpu.adam_update", 0, adamParams, adamKernel, false,
         /*updates_in_place=*/true});
  r.add({"global_norm", "cpu", "cpu.global_norm", 0, floatInputs, globalNormKernel});
}

}  // namespace kiln
