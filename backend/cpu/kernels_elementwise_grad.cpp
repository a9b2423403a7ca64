// CPU kernels of the backward ops of the elementwise and reduction families
// (core/ops/elementwise_grad.cpp, core/ops/reduction_grad.cpp):
//   unary_backward(g, v) {fn, ...}  one functor per forward op, picked by `fn`
//   binary_backward(g, a, b) {fn, input}  div, pow, maximum, minimum, atan2, xlogy
//   prod_backward(g, x, y) {dims, keepdim}
// Formulas and their order of operations are PyTorch's *_backward kernels
// (derivatives.yaml / FunctionsManual.cpp), including the boundary
// conventions (hardtanh is strict at its bounds, clamp is not, neither
// passes a NaN's gradient; hardswish gives g from x = 3 on, hardsigmoid zero
// at +-3; maximum and minimum halve the gradient on ties). Half types
// compute in float; the masks use cpu_math.h's branch-free select so the
// loops vectorize.
#include <cmath>
#include <limits>
#include <string>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/unary_grad_block.h"
#include "backend/cpu/unary_ops.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

// ---- unary_backward: operator()(C g, C v) with v = x (or y, see the core table)

/// A parameterless gradient functor NAME with body BODY over g and v; the
/// _WIDE form for bodies of exp/tanh/erf polynomials (kWideSimd, unary_ops.h).
#define KILN_UNARY_GRAD_IMPL(NAME, WIDE, ...) \
  struct NAME {                               \
    static constexpr bool kWideSimd = WIDE;   \
    explicit NAME(const Node&) {}             \
    template <class C>                        \
    C operator()(C g, C v) const {            \
      __VA_ARGS__                             \
    }                                         \
  };
#define KILN_UNARY_GRAD(NAME, ...) KILN_UNARY_GRAD_IMPL(NAME, false, __VA_ARGS__)
#define KILN_UNARY_GRAD_WIDE(NAME, ...) KILN_UNARY_GRAD_IMPL(NAME, true, __VA_ARGS__)

KILN_UNARY_GRAD(AbsGrad, return g * C((C(0) < v) - (v < C(0)));)  // sgn(0) = sgn(NaN) = 0
KILN_UNARY_GRAD(Expm1Grad, return g * (v + C(1));)                // v = y
KILN_UNARY_GRAD(Log1pGrad, return g / (v + C(1));)
KILN_UNARY_GRAD(SqrtGrad, return g / (C(2) * v);)              // v = y
KILN_UNARY_GRAD(RsqrtGrad, return C(-0.5) * g * (v * v * v);)  // v = y
KILN_UNARY_GRAD(ReciprocalGrad, return -g * (v * v);)          // v = y
KILN_UNARY_GRAD(SinGrad, return g * std::cos(v);)
KILN_UNARY_GRAD(CosGrad, return g * -std::sin(v);)
KILN_UNARY_GRAD(TanhGrad, return g * (C(1) - v * v);)       // v = y
KILN_UNARY_GRAD(SigmoidGrad, return g * ((C(1) - v) * v);)  // v = y
KILN_UNARY_GRAD_WIDE(ErfGrad, return C(M_2_SQRTPI) * expAny(-(v * v)) * g;)
KILN_UNARY_GRAD_WIDE(SiluGrad, const C s = C(1) / (C(1) + expAny(-v)); return g * s * (C(1) + v * (C(1) - s));)
KILN_UNARY_GRAD(MishGrad, const C s = C(1) / (C(1) + std::exp(-v)); const C t = std::tanh(std::log1p(std::exp(v)));
                return g * (t + v * s * (C(1) - t * t));)
// The vectorized loop of PyTorch's CPU hardswish_backward (what every element
// but a scalar tail takes): g from x >= 3 on, so x = 3 gets g and a NaN NaN.
// (Its scalar tail and its CUDA kernel take the middle branch at 3 and pass
// a NaN's g; Kiln's CUDA kernel follows the CUDA one.)
KILN_UNARY_GRAD(HardswishGrad, return select(v < C(-3), C(0), select(v >= C(3), g, g*(v / C(3) + C(0.5))));)
// PyTorch multiplies by the float constant 1.0f / 6.0f in every dtype, so a
// double gradient carries float's rounding of 1/6 (3e-8 relative): match it.
KILN_UNARY_GRAD(HardsigmoidGrad, return select((v > C(-3)) & (v < C(3)), g* C(1.0f / 6.0f), C(0));)
#undef KILN_UNARY_GRAD
#undef KILN_UNARY_GRAD_WIDE
#undef KILN_UNARY_GRAD_IMPL

/// clamp passes the gradient on min <= x <= max; hardtanh only strictly
/// inside. Neither passes it at a NaN x: PyTorch's clamp_backward masks with
/// (x >= min) & (x <= max), and the vectorized loop of its CPU
/// hardtanh_backward with (x > min) & (x < max), which every element but a
/// loop's scalar tail takes. (PyTorch's CUDA kernel and that scalar tail test
/// x <= min || x >= max instead and pass a NaN's gradient; Kiln's CUDA
/// kernel follows PyTorch's CUDA kernel.)
struct ClampGrad {
  double lo, hi;
  bool strict;
  explicit ClampGrad(const Node& n)
      : lo(n.f(n.s("fn") == "hardtanh" ? "min_val" : "min")),
        hi(n.f(n.s("fn") == "hardtanh" ? "max_val" : "max")),
        strict(n.s("fn") == "hardtanh") {}
  template <class C>
  C operator()(C g, C v) const {
    if (strict) return select((v > C(lo)) & (v < C(hi)), g, C(0));
    return select((v >= C(lo)) & (v <= C(hi)), g, C(0));
  }
};

/// gelu's gradient in one form (see GeluOp for why a type per form).
template <bool kTanh>
struct GeluGrad {
  static constexpr bool kWideSimd = true;
  explicit GeluGrad(const Node&) {}
  template <class C>
  C operator()(C g, C x) const {
    if constexpr (kTanh) {
      const C beta = C(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = C(0.044715);
      const C x_sq = x * x, inner = beta * (x + kappa * (x_sq * x)), t = tanhAny(inner);
      const C left = C(0.5) * x, right = C(1) + t;
      const C right_derivative = left * (C(1) - t * t) * (beta * (C(1) + C(3) * kappa * x_sq));
      return g * (C(0.5) * right + right_derivative);
    } else {
      const C cdf = C(0.5) * (C(1) + erfAny(x * C(M_SQRT1_2)));
      const C pdf = C(M_2_SQRTPI * M_SQRT1_2 * 0.5) * expAny(x * x * C(-0.5));
      return g * (cdf + x * pdf);
    }
  }
};

struct LeakyReluGrad {
  double slope;
  explicit LeakyReluGrad(const Node& n) : slope(n.f("negative_slope")) {}
  template <class C>
  C operator()(C g, C x) const {
    return select(x > C(0), g, g * C(slope));
  }
};

struct EluGrad {
  double alpha;
  explicit EluGrad(const Node& n) : alpha(n.f("alpha")) {}
  template <class C>
  C operator()(C g, C x) const {
    // The exponential side unless x > 0, so a NaN gives NaN, as the
    // vectorized loop of PyTorch's CPU elu_backward.
    return select(x > C(0), g, g * C(alpha) * expAny(x));
  }
};

/// Linear (gradient g) above the threshold, as the forward.
struct SoftplusGrad {
  double beta, threshold;
  explicit SoftplusGrad(const Node& n) : beta(n.f("beta")), threshold(n.f("threshold")) {}
  template <class C>
  C operator()(C g, C x) const {
    const C z = expAny(x * C(beta));
    return select(x * C(beta) > C(threshold), g, g * z / (z + C(1)));
  }
};

template <class T, class Op>
  requires(!kWideSimd<Op>)
KILN_SIMD_CLONES void unaryGradRun(const T* pg, const T* pv, T* po, int64_t n, Op op) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) po[i] = T(op(C(pg[i]), C(pv[i])));
}
template <class T, class Op>
  requires(kWideSimd<Op>)
KILN_SIMD_CLONES_512 void unaryGradRun(const T* pg, const T* pv, T* po, int64_t n, Op op) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) po[i] = T(op(C(pg[i]), C(pv[i])));
}

template <class Op>
void unaryGradKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor g = asDType(in[0], o.dtype()), v = asDType(in[1], o.dtype());
  const Op op(n);
  dispatchFloating(o.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pg = g.data<T>(), *pv = v.data<T>();
    T* po = o.data<T>();
    parallelFor(o.numel(), kParallelGrain,
                [=](int64_t b, int64_t e) { unaryGradRun(pg + b, pv + b, po + b, e - b, op); });
  });
}

/// The block loop of one unary gradient functor, for the fused kernel.
template <class T, class Op>
UnaryGradBlock<T> unaryGradBlock(const Node& n) {
  return [op = Op(n)](const T* g, const T* v, T* o, int64_t cnt) { unaryGradRun(g, v, o, cnt, op); };
}

void geluGradKernel(const Node& n, Inputs in, Outputs out, KernelContext& ctx) {
  if (geluTanh(n))
    unaryGradKernel<GeluGrad<true>>(n, in, out, ctx);
  else
    unaryGradKernel<GeluGrad<false>>(n, in, out, ctx);
}

template <class T>
UnaryGradBlock<T> geluGradBlock(const Node& n) {
  return geluTanh(n) ? unaryGradBlock<T, GeluGrad<true>>(n) : unaryGradBlock<T, GeluGrad<false>>(n);
}

struct UnaryGradKernel {
  const char* fn;
  KernelFn kernel;
  UnaryGradBlock<float> (*block_f32)(const Node&);
  UnaryGradBlock<double> (*block_f64)(const Node&);
};
#define KILN_UNARY_GRAD_ENTRY(FN, OP) \
  { FN, unaryGradKernel<OP>, unaryGradBlock<float, OP>, unaryGradBlock<double, OP> }
const UnaryGradKernel kUnaryGradKernels[] = {
    KILN_UNARY_GRAD_ENTRY("abs", AbsGrad),
    KILN_UNARY_GRAD_ENTRY("expm1", Expm1Grad),
    KILN_UNARY_GRAD_ENTRY("clamp", ClampGrad),
    KILN_UNARY_GRAD_ENTRY("hardtanh", ClampGrad),
    KILN_UNARY_GRAD_ENTRY("log1p", Log1pGrad),
    KILN_UNARY_GRAD_ENTRY("sqrt", SqrtGrad),
    KILN_UNARY_GRAD_ENTRY("rsqrt", RsqrtGrad),
    KILN_UNARY_GRAD_ENTRY("reciprocal", ReciprocalGrad),
    KILN_UNARY_GRAD_ENTRY("sin", SinGrad),
    KILN_UNARY_GRAD_ENTRY("cos", CosGrad),
    KILN_UNARY_GRAD_ENTRY("tanh", TanhGrad),
    KILN_UNARY_GRAD_ENTRY("sigmoid", SigmoidGrad),
    KILN_UNARY_GRAD_ENTRY("erf", ErfGrad),
    KILN_UNARY_GRAD_ENTRY("silu", SiluGrad),
    KILN_UNARY_GRAD_ENTRY("mish", MishGrad),
    KILN_UNARY_GRAD_ENTRY("hardswish", HardswishGrad),
    KILN_UNARY_GRAD_ENTRY("hardsigmoid", HardsigmoidGrad),
    {"gelu", geluGradKernel, geluGradBlock<float>, geluGradBlock<double>},
    KILN_UNARY_GRAD_ENTRY("leaky_relu", LeakyReluGrad),
    KILN_UNARY_GRAD_ENTRY("elu", EluGrad),
    KILN_UNARY_GRAD_ENTRY("softplus", SoftplusGrad),
};
#undef KILN_UNARY_GRAD_ENTRY

const UnaryGradKernel* unaryGradEntry(const Node& n) {
  const std::string& fn = n.s("fn");
  for (const UnaryGradKernel& k : kUnaryGradKernels)
    if (fn == k.fn) return &k;
  return nullptr;
}

void unaryBackwardKernel(const Node& n, Inputs in, Outputs out, KernelContext& ctx) {
  if (const UnaryGradKernel* k = unaryGradEntry(n)) return k->kernel(n, in, out, ctx);
  opFail(n, "no CPU kernel for fn \"" + n.s("fn") + "\"");
}

// ---- binary_backward: operator()(C g, C a, C b) for the input `input` -----

struct DivGrad {
  int64_t input;
  template <class C>
  C operator()(C g, C a, C b) const {
    return input == 0 ? g / b : -g * ((a / b) / b);
  }
};

/// d/da = b a^(b-1) (0 where b == 0); d/db = a^b log(a) (0 where a == 0 and b >= 0).
struct PowGrad {
  int64_t input;
  template <class C>
  C operator()(C g, C a, C b) const {
    if (input == 0) return select(b == C(0), C(0), g * (b * std::pow(a, b - C(1))));
    return g * select((a == C(0)) & (b >= C(0)), C(0), std::pow(a, b) * std::log(a));
  }
};

/// Ties split the gradient in half; a NaN on either side gives both the full g.
struct MaximumGrad {
  int64_t input;
  template <class C>
  C operator()(C g, C a, C b) const {
    const C r = select(a == b, g / C(2), g);
    return select(input == 0 ? a < b : a > b, C(0), r);
  }
};
struct MinimumGrad {
  int64_t input;
  template <class C>
  C operator()(C g, C a, C b) const {
    const C r = select(a == b, g / C(2), g);
    return select(input == 0 ? a > b : a < b, C(0), r);
  }
};

/// PyTorch's atan2_backward: r = 1 / (a^2 + b^2); d/da = g b r, d/db = g (-a) r
/// (NaN at the origin, where r is inf and 0 * inf is NaN).
struct Atan2Grad {
  int64_t input;
  template <class C>
  C operator()(C g, C a, C b) const {
    const C r = C(1) / (a * a + b * b);
    return input == 0 ? g * b * r : g * -a * r;
  }
};

/// PyTorch's xlogy backward: d/da = g * log(b), 0 where a == 0 and b <= 0
/// (so +inf at a = 0, b = +inf, and NaN where b is NaN); d/db = g * a / b
/// (NaN at a = b = 0).
struct XlogyGrad {
  int64_t input;
  template <class C>
  C operator()(C g, C a, C b) const {
    if (input == 1) return g * a / b;
    return g * ((a == C(0) && b <= C(0)) ? C(0) : std::log(b));
  }
};

template <class Op>
void binaryGradKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const DType t = o.dtype();
  const Tensor g = asDType(in[0], t), a = asDType(in[1], t), b = asDType(in[2], t);
  const Op op{n.i("input")};
  const Shape& s = o.shape();
  dispatchFloating(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* po = o.data<T>();
    const T *pg = g.data<T>(), *pa = a.data<T>(), *pb = b.data<T>();
    forEachStrided<4>(s,
                      {contiguousStrides(s), broadcastStrides(g.shape(), s), broadcastStrides(a.shape(), s),
                       broadcastStrides(b.shape(), s)},
                      [=](const int64_t* off, const int64_t* st, int64_t cnt) {
                        for (int64_t i = 0; i < cnt; ++i)
                          po[off[0] + i] =
                              T(op(C(pg[off[1] + i * st[1]]), C(pa[off[2] + i * st[2]]), C(pb[off[3] + i * st[3]])));
                      });
  });
}

void binaryBackwardKernel(const Node& n, Inputs in, Outputs out, KernelContext& ctx) {
  const std::string& fn = n.s("fn");
  if (fn == "div") return binaryGradKernel<DivGrad>(n, in, out, ctx);
  if (fn == "pow") return binaryGradKernel<PowGrad>(n, in, out, ctx);
  if (fn == "maximum") return binaryGradKernel<MaximumGrad>(n, in, out, ctx);
  if (fn == "minimum") return binaryGradKernel<MinimumGrad>(n, in, out, ctx);
  if (fn == "atan2") return binaryGradKernel<Atan2Grad>(n, in, out, ctx);
  if (fn == "xlogy") return binaryGradKernel<XlogyGrad>(n, in, out, ctx);
  opFail(n, "no CPU kernel for fn \"" + fn + "\"");
}

// ---- prod_backward ---------------------------------------------------------

/// PyTorch's prod_backward. No zero anywhere in x: g * (y / x). Else, for
/// prod over one dim (prod_safe_zeros_backward), every element of every
/// slice gets g times the product of the others as a prefix product times a
/// suffix product (so an inf meets a zero as 0 * inf = NaN); for prod over
/// all elements the same, unless x holds more than one zero: all 0.
void prodBackwardKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const DType t = o.dtype();
  const Tensor g = asDType(in[0], t), x = asDType(in[1], t), y = asDType(in[2], t);
  const Shape& xs = x.shape();
  const auto axes = reductionAxes(n, n.is("dims"), x.rank());
  const bool all_dims = static_cast<int64_t>(axes.size()) == x.rank();
  const Shape kept = reducedShape(xs, axes, true);
  // g and y, read with the reduced dims kept, broadcast over each slice.
  const Shape slot_strides = broadcastStrides(kept, xs), strides = contiguousStrides(xs);
  dispatchFloating(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T *pg = g.data<T>(), *px = x.data<T>(), *py = y.data<T>();
    T* po = o.data<T>();
    if (x.rank() == 0) {
      po[0] = pg[0];
      return;
    }
    int64_t zeros = 0;
    for (int64_t i = 0; i < x.numel(); ++i) zeros += C(px[i]) == C(0);
    if (zeros == 0) {
      forEachStrided<2>(xs, {strides, slot_strides}, [=](const int64_t* off, const int64_t* st, int64_t cnt) {
        for (int64_t i = 0; i < cnt; ++i) {
          const int64_t at = off[0] + i * st[0], slot = off[1] + i * st[1];
          po[at] = T(C(pg[slot]) * (C(py[slot]) / C(px[at])));
        }
      });
      return;
    }
    if (all_dims && zeros > 1) {
      std::fill(po, po + o.numel(), T(0));
      return;
    }
    // Each slice's element offsets in order, then its exclusive products.
    std::vector<std::vector<int64_t>> slices(static_cast<size_t>(numelOf(kept)));
    forEachStrided<2>(
        xs, {strides, slot_strides},
        [&](const int64_t* off, const int64_t* st, int64_t cnt) {
          for (int64_t i = 0; i < cnt; ++i)
            slices[static_cast<size_t>(off[1] + i * st[1])].push_back(off[0] + i * st[0]);
        },
        std::numeric_limits<int64_t>::max());
    for (size_t slot = 0; slot < slices.size(); ++slot) {
      const std::vector<int64_t>& at = slices[slot];
      std::vector<C> prefix(at.size());
      C acc = C(1);
      for (size_t k = 0; k < at.size(); ++k) prefix[k] = acc, acc *= C(px[at[k]]);
      C suffix = C(1);
      for (size_t k = at.size(); k-- > 0;) {
        po[at[k]] = T(C(pg[slot]) * (prefix[k] * suffix));
        suffix *= C(px[at[k]]);
      }
    }
  });
}

void add(KernelRegistry& r, const char* op, KernelFn fn) {
  r.add({op, "cpu", std::string("cpu.") + op, 0, nullptr, fn});
}

}  // namespace

template <>
UnaryGradBlock<float> unaryBackwardBlock<float>(const Node& n) {
  const UnaryGradKernel* k = unaryGradEntry(n);
  return k ? k->block_f32(n) : nullptr;
}
template <>
UnaryGradBlock<double> unaryBackwardBlock<double>(const Node& n) {
  const UnaryGradKernel* k = unaryGradEntry(n);
  return k ? k->block_f64(n) : nullptr;
}

}  // namespace kiln::cpu

namespace kiln {

void registerCpuElementwiseGradKernels(KernelRegistry& r) {
  using namespace cpu;
  // Elementwise loops over (g, x[, y]): may write over an input in place.
  for (auto [op, fn] : {std::pair<const char*, KernelFn>{"unary_backward", unaryBackwardKernel},
                        std::pair<const char*, KernelFn>{"binary_backward", binaryBackwardKernel}}) {
    KernelDef k{op, "cpu", std::string("cpu.") + op, 0, nullptr, fn};
    k.writes_over_input = true;
    r.add(std::move(k));
  }
  add(r, "prod_backward", prodBackwardKernel);
}

}  // namespace kiln
