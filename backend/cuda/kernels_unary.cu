// CUDA kernels of the unary math and activations (exp ... softplus, the
// all-dtype neg/abs/relu/sign/clamp) and of unary_backward and
// binary_backward (core/ops/elementwise.cpp, elementwise_grad.cpp). Each op
// is a functor over device_math.cuh's formula, run by elementwise_launch.cuh's
// kernels; exp and tanh use the CPU's own polynomials and the multiply-adds
// the CPU rounds twice stay rounded twice, so results match the CPU bit for
// bit except where CUDA's libm differs from glibc's (log, log1p, expm1, sin,
// cos, erf and the double-precision tanh: an ulp or two).
#include "backend/cuda/elementwise_launch.cuh"

namespace kiln::cuda {
namespace {

using namespace elementwise;

// ---- unary ops: math functors operator()(C x) on the compute type ---------------

#define KILN_UNARY(NAME, ...)            \
  struct NAME {                          \
    explicit NAME(const Node&) {}        \
    template <class C>                   \
    __device__ C operator()(C x) const { \
      return __VA_ARGS__;                \
    }                                    \
  };

KILN_UNARY(ExpM, op_exp(x))
KILN_UNARY(Expm1M, op_expm1(x))
KILN_UNARY(LogM, op_log(x))
KILN_UNARY(Log1pM, op_log1p(x))
KILN_UNARY(SqrtM, op_sqrt(x))
KILN_UNARY(RsqrtM, op_rsqrt(x))
KILN_UNARY(ReciprocalM, op_reciprocal(x))
KILN_UNARY(SinM, op_sin(x))
KILN_UNARY(CosM, op_cos(x))
KILN_UNARY(TanhM, op_tanh(x))
KILN_UNARY(SigmoidM, op_sigmoid(x))
KILN_UNARY(ErfM, op_erf(x))
KILN_UNARY(FloorM, op_floor(x))
KILN_UNARY(CeilM, op_ceil(x))
KILN_UNARY(RoundM, op_round(x))
KILN_UNARY(SiluM, op_silu(x))
KILN_UNARY(MishM, op_mish(x))
KILN_UNARY(HardswishM, op_hardswish(x))
KILN_UNARY(HardsigmoidM, op_hardsigmoid(x))
#undef KILN_UNARY

/// gelu's `approximate` ("none" or "tanh"; anything else fails, as on the CPU).
bool geluTanh(const Node& n) {
  const std::string& a = n.s("approximate");
  if (a != "none" && a != "tanh") opFail(n, "approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
  return a == "tanh";
}

template <bool kTanh>
struct GeluM {
  explicit GeluM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (kTanh)
      return op_gelu_tanh(x);
    else
      return op_gelu_none(x);
  }
};

/// clamp and hardtanh on floating types: NaN stays NaN; min > max gives max.
struct ClampM {
  double lo, hi;
  explicit ClampM(const Node& n)
      : lo(n.f(n.is(Op::hardtanh) ? "min_val" : "min")), hi(n.f(n.is(Op::hardtanh) ? "max_val" : "max")) {}
  template <class C>
  __device__ C operator()(C x) const {
    return op_clamp(x, lo, hi);
  }
};

/// Integer clamp bound: rounded inwards and saturated to C's range (unary_ops.h).
template <class C>
C clampBound(double v, bool up) {
  constexpr double kMin = static_cast<double>(std::numeric_limits<C>::lowest());
  constexpr double kMax = static_cast<double>(std::numeric_limits<C>::max());
  v = up ? std::ceil(v) : std::floor(v);
  if (v <= kMin) return std::numeric_limits<C>::lowest();
  if (v >= kMax) return std::numeric_limits<C>::max();
  return static_cast<C>(v);
}

template <class C>
struct ClampIntM {
  C lo, hi;
  __device__ C operator()(C x) const {
    const C m = x < lo ? lo : x;  // std::max(x, lo)
    return hi < m ? hi : m;       // std::min(m, hi)
  }
};

struct LeakyReluM {
  double slope;
  explicit LeakyReluM(const Node& n) : slope(n.f("negative_slope")) {}
  template <class C>
  __device__ C operator()(C x) const {
    return op_leaky_relu(x, slope);
  }
};

struct EluM {
  double alpha;
  explicit EluM(const Node& n) : alpha(n.f("alpha")) {}
  template <class C>
  __device__ C operator()(C x) const {
    return op_elu(x, alpha);
  }
};

struct SoftplusM {
  double beta, threshold;
  explicit SoftplusM(const Node& n) : beta(n.f("beta")), threshold(n.f("threshold")) {}
  template <class C>
  __device__ C operator()(C x) const {
    return op_softplus(x, beta, threshold);
  }
};

// Unary ops on every dtype.
struct NegM {
  explicit NegM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>)
      return x;
    else
      return static_cast<C>(-x);
  }
};
struct AbsM {
  explicit AbsM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return op_abs(x);
    else if constexpr (std::is_signed_v<C>)
      return static_cast<C>(x < 0 ? -x : x);
    else
      return x;
  }
};
struct ReluM {  // x < 0 ? 0 : x keeps NaN
  explicit ReluM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(0) : x;
  }
};
struct SignM {  // (0 < x) - (x < 0): sign(NaN) is 0
  explicit SignM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>)
      return static_cast<C>(x != 0);
    else
      return static_cast<C>((C(0) < x) - (x < C(0)));
  }
};

template <class T, class M>
struct UnaryF {
  M m;
  __device__ T operator()(T x) const { return st<T>(m(ld(x))); }
};

template <class T, class M>
void unaryLaunch(const M& m, Ins in, Outs out, CudaContext& ctx) {
  launch<1, UnaryF<T, M>, T, T>(UnaryF<T, M>{m}, out[0].data, out[0].shape(), {in[0].data}, {&in[0].shape()}, ctx,
                                "cuda.unary");
}

template <class M, bool kFloatOnly>
void unaryKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const M m(n);
  auto body = [&](auto tag) { unaryLaunch<decltype(tag)>(m, in, out, ctx); };
  if constexpr (kFloatOnly)
    dispatchFloating(in[0].dtype(), n.op().c_str(), body);
  else
    dispatchAll(in[0].dtype(), n.op().c_str(), body);
}

void geluKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  if (geluTanh(n))
    unaryKernel<GeluM<true>, true>(n, in, out, ctx);
  else
    unaryKernel<GeluM<false>, true>(n, in, out, ctx);
}

/// clamp: floating types clamp in their compute type, integers and bool to
/// the bounds rounded inwards and saturated (unary_ops.h's ClampOp).
void clampKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  dispatchAll(in[0].dtype(), "clamp", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      unaryLaunch<T>(ClampM(n), in, out, ctx);
    } else {
      const ClampIntM<T> m{clampBound<T>(n.f("min"), true), clampBound<T>(n.f("max"), false)};
      unaryLaunch<T>(m, in, out, ctx);
    }
  });
}

// ---- unary_backward: operator()(C g, C v), v = x (or y, see elementwise_grad.cpp)

#define KILN_UNARY_GRAD(NAME, ...)            \
  struct NAME {                               \
    template <class C>                        \
    __device__ C operator()(C g, C v) const { \
      __VA_ARGS__                             \
    }                                         \
  };

KILN_UNARY_GRAD(AbsG, return grad_abs(g, v);)
KILN_UNARY_GRAD(Expm1G, return grad_expm1(g, v);)
KILN_UNARY_GRAD(Log1pG, return grad_log1p(g, v);)
KILN_UNARY_GRAD(SqrtG, return grad_sqrt(g, v);)
KILN_UNARY_GRAD(RsqrtG, return grad_rsqrt(g, v);)
KILN_UNARY_GRAD(ReciprocalG, return grad_reciprocal(g, v);)
KILN_UNARY_GRAD(SinG, return grad_sin(g, v);)
KILN_UNARY_GRAD(CosG, return grad_cos(g, v);)
KILN_UNARY_GRAD(TanhG, return grad_tanh(g, v);)
KILN_UNARY_GRAD(SigmoidG, return grad_sigmoid(g, v);)
KILN_UNARY_GRAD(ErfG, return grad_erf(g, v);)
KILN_UNARY_GRAD(SiluG, return grad_silu(g, v);)
KILN_UNARY_GRAD(MishG, return grad_mish(g, v);)
KILN_UNARY_GRAD(HardswishG, return grad_hardswish(g, v);)
KILN_UNARY_GRAD(HardsigmoidG, return grad_hardsigmoid(g, v);)
#undef KILN_UNARY_GRAD

/// clamp passes the gradient on min <= x <= max; hardtanh only strictly inside.
struct ClampG {
  double lo, hi;
  bool strict;
  explicit ClampG(const Node& n)
      : lo(n.f(n.s("fn") == "hardtanh" ? "min_val" : "min")),
        hi(n.f(n.s("fn") == "hardtanh" ? "max_val" : "max")),
        strict(n.s("fn") == "hardtanh") {}
  template <class C>
  __device__ C operator()(C g, C v) const {
    return strict ? grad_hardtanh(g, v, lo, hi) : grad_clamp(g, v, lo, hi);
  }
};

template <bool kTanh>
struct GeluG {
  template <class C>
  __device__ C operator()(C g, C x) const {
    if constexpr (kTanh)
      return grad_gelu_tanh(g, x);
    else
      return grad_gelu_none(g, x);
  }
};

struct LeakyReluG {
  double slope;
  template <class C>
  __device__ C operator()(C g, C x) const {
    return grad_leaky_relu(g, x, slope);
  }
};

struct EluG {
  double alpha;
  template <class C>
  __device__ C operator()(C g, C x) const {
    return grad_elu(g, x, alpha);
  }
};

struct SoftplusG {
  double beta, threshold;
  template <class C>
  __device__ C operator()(C g, C x) const {
    return grad_softplus(g, x, beta, threshold);
  }
};

template <class T, class G>
struct UnaryGradF {
  G grad;
  __device__ T operator()(T g, T v) const { return st<T>(grad(ld(g), ld(v))); }
};

template <class G>
void unaryGradLaunch(const G& grad, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  Scratch scratch(ctx);
  const void* g = operandAs(in[0], o.dtype(), scratch, ctx);
  const void* v = operandAs(in[1], o.dtype(), scratch, ctx);
  dispatchFloating(o.dtype(), "unary_backward", [&](auto tag) {
    using T = decltype(tag);
    launch<2, UnaryGradF<T, G>, T, T, T>(UnaryGradF<T, G>{grad}, o.data, o.shape(), {g, v},
                                         {&in[0].shape(), &in[1].shape()}, ctx, "cuda.unary_backward");
  });
}

void unaryBackwardKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const std::string& fn = n.s("fn");
  if (fn == "abs") return unaryGradLaunch(AbsG{}, in, out, ctx);
  if (fn == "clamp" || fn == "hardtanh") return unaryGradLaunch(ClampG(n), in, out, ctx);
  if (fn == "expm1") return unaryGradLaunch(Expm1G{}, in, out, ctx);
  if (fn == "log1p") return unaryGradLaunch(Log1pG{}, in, out, ctx);
  if (fn == "sqrt") return unaryGradLaunch(SqrtG{}, in, out, ctx);
  if (fn == "rsqrt") return unaryGradLaunch(RsqrtG{}, in, out, ctx);
  if (fn == "reciprocal") return unaryGradLaunch(ReciprocalG{}, in, out, ctx);
  if (fn == "sin") return unaryGradLaunch(SinG{}, in, out, ctx);
  if (fn == "cos") return unaryGradLaunch(CosG{}, in, out, ctx);
  if (fn == "tanh") return unaryGradLaunch(TanhG{}, in, out, ctx);
  if (fn == "sigmoid") return unaryGradLaunch(SigmoidG{}, in, out, ctx);
  if (fn == "erf") return unaryGradLaunch(ErfG{}, in, out, ctx);
  if (fn == "silu") return unaryGradLaunch(SiluG{}, in, out, ctx);
  if (fn == "mish") return unaryGradLaunch(MishG{}, in, out, ctx);
  if (fn == "hardswish") return unaryGradLaunch(HardswishG{}, in, out, ctx);
  if (fn == "hardsigmoid") return unaryGradLaunch(HardsigmoidG{}, in, out, ctx);
  if (fn == "gelu") {
    if (geluTanh(n)) return unaryGradLaunch(GeluG<true>{}, in, out, ctx);
    return unaryGradLaunch(GeluG<false>{}, in, out, ctx);
  }
  if (fn == "leaky_relu") return unaryGradLaunch(LeakyReluG{n.f("negative_slope")}, in, out, ctx);
  if (fn == "elu") return unaryGradLaunch(EluG{n.f("alpha")}, in, out, ctx);
  if (fn == "softplus") return unaryGradLaunch(SoftplusG{n.f("beta"), n.f("threshold")}, in, out, ctx);
  opFail(n, "no CUDA kernel for fn \"" + fn + "\"");
}

// ---- binary_backward: operator()(C g, C a, C b) for the input `input` -----------

struct DivG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    return input == 0 ? g / b : -g * ((a / b) / b);
  }
};

/// d/da = b a^(b-1) (0 where b == 0); d/db = a^b log(a) (0 where a == 0 and b >= 0).
struct PowG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    if (input == 0) return b == C(0) ? C(0) : g * (b * mPow(a, b - C(1)));
    return g * ((a == C(0)) & (b >= C(0)) ? C(0) : mPow(a, b) * mLog(a));
  }
};

/// PyTorch's atan2_backward: r = 1 / (a^2 + b^2); d/da = g b r, d/db = g (-a) r.
struct Atan2G {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    const C r = C(1) / (a * a + b * b);
    return input == 0 ? g * b * r : g * -a * r;
  }
};

/// PyTorch's xlogy backward: d/da = g log(b), 0 where a == 0 and b <= 0; d/db = g a / b.
struct XlogyG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    if (input == 1) return g * a / b;
    return g * ((a == C(0) && b <= C(0)) ? C(0) : mLog(b));
  }
};

/// Ties split the gradient in half; a NaN on either side gives both the full g.
struct MaximumG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    const C r = a == b ? g / C(2) : g;
    return (input == 0 ? a < b : a > b) ? C(0) : r;
  }
};
struct MinimumG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    const C r = a == b ? g / C(2) : g;
    return (input == 0 ? a > b : a < b) ? C(0) : r;
  }
};

template <class T, class G>
struct BinaryGradF {
  G grad;
  __device__ T operator()(T g, T a, T b) const { return st<T>(grad(ld(g), ld(a), ld(b))); }
};

template <class G>
void binaryGradLaunch(const G& grad, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  Scratch scratch(ctx);
  const void* g = operandAs(in[0], o.dtype(), scratch, ctx);
  const void* a = operandAs(in[1], o.dtype(), scratch, ctx);
  const void* b = operandAs(in[2], o.dtype(), scratch, ctx);
  dispatchFloating(o.dtype(), "binary_backward", [&](auto tag) {
    using T = decltype(tag);
    launch<3, BinaryGradF<T, G>, T, T, T, T>(BinaryGradF<T, G>{grad}, o.data, o.shape(), {g, a, b},
                                             {&in[0].shape(), &in[1].shape(), &in[2].shape()}, ctx,
                                             "cuda.binary_backward");
  });
}

void binaryBackwardKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const std::string& fn = n.s("fn");
  const int64_t input = n.i("input");
  if (fn == "div") return binaryGradLaunch(DivG{input}, in, out, ctx);
  if (fn == "pow") return binaryGradLaunch(PowG{input}, in, out, ctx);
  if (fn == "maximum") return binaryGradLaunch(MaximumG{input}, in, out, ctx);
  if (fn == "minimum") return binaryGradLaunch(MinimumG{input}, in, out, ctx);
  if (fn == "atan2") return binaryGradLaunch(Atan2G{input}, in, out, ctx);
  if (fn == "xlogy") return binaryGradLaunch(XlogyG{input}, in, out, ctx);
  opFail(n, "no CUDA kernel for fn \"" + fn + "\"");
}

}  // namespace

void registerCudaUnaryKernels(CudaKernelRegistry& r) {
  add(r, "neg", unaryKernel<NegM, false>);
  add(r, "abs", unaryKernel<AbsM, false>);
  add(r, "relu", unaryKernel<ReluM, false>);
  add(r, "sign", unaryKernel<SignM, false>);
  add(r, "clamp", clampKernel);
  add(r, "exp", unaryKernel<ExpM, true>);
  add(r, "expm1", unaryKernel<Expm1M, true>);
  add(r, "log", unaryKernel<LogM, true>);
  add(r, "log1p", unaryKernel<Log1pM, true>);
  add(r, "sqrt", unaryKernel<SqrtM, true>);
  add(r, "rsqrt", unaryKernel<RsqrtM, true>);
  add(r, "reciprocal", unaryKernel<ReciprocalM, true>);
  add(r, "sin", unaryKernel<SinM, true>);
  add(r, "cos", unaryKernel<CosM, true>);
  add(r, "tanh", unaryKernel<TanhM, true>);
  add(r, "sigmoid", unaryKernel<SigmoidM, true>);
  add(r, "erf", unaryKernel<ErfM, true>);
  add(r, "floor", unaryKernel<FloorM, true>);
  add(r, "ceil", unaryKernel<CeilM, true>);
  add(r, "round", unaryKernel<RoundM, true>);
  add(r, "silu", unaryKernel<SiluM, true>);
  add(r, "mish", unaryKernel<MishM, true>);
  add(r, "hardswish", unaryKernel<HardswishM, true>);
  add(r, "hardsigmoid", unaryKernel<HardsigmoidM, true>);
  add(r, "gelu", geluKernel);
  add(r, "hardtanh", unaryKernel<ClampM, true>);
  add(r, "leaky_relu", unaryKernel<LeakyReluM, true>);
  add(r, "elu", unaryKernel<EluM, true>);
  add(r, "softplus", unaryKernel<SoftplusM, true>);
  add(r, "unary_backward", unaryBackwardKernel, nullptr, operandWorkspace);
  add(r, "binary_backward", binaryBackwardKernel, broadcastFits, operandWorkspace);
}

}  // namespace kiln::cuda
