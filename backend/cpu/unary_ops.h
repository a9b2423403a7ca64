// The unary elementwise ops' per-element functors (built from the node, so
// attributes such as gelu's `approximate` are read once), shared by the
// one-op kernels (kernels_elementwise.cpp) and the fused elementwise kernel
// (kernels_fused.cpp), so a fused chain computes bit for bit what the
// separate kernels compute.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/cpu_math.h"
#include "core/ir.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {

/// Functors whose math is expVec/tanhVec/erfVec polynomials declare
/// `static constexpr bool kWideSimd = true`: their loops (unaryRun and the
/// gradients' unaryGradRun) also get an AVX-512 clone (KILN_SIMD_CLONES_512;
/// gelu's forward over 2M floats 1.6x faster on Zen 4), the rest only AVX2.
template <class Op>
inline constexpr bool kWideSimd = requires { requires Op::kWideSimd; };

template <class T, class Op>
  requires(!kWideSimd<Op>)
KILN_SIMD_CLONES void unaryRun(const T* px, T* po, int64_t n, Op op) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) po[i] = T(op(C(px[i])));
}
template <class T, class Op>
  requires(kWideSimd<Op>)
KILN_SIMD_CLONES_512 void unaryRun(const T* px, T* po, int64_t n, Op op) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) po[i] = T(op(C(px[i])));
}

/// A stateless floating-point unary op `NAME` computing EXPR from `x` of
/// type C; the _WIDE form for EXPRs of exp/tanh/erf polynomials (kWideSimd).
#define KILN_FLOAT_UNARY_IMPL(NAME, WIDE, EXPR) \
  struct NAME {                                 \
    static constexpr bool kWideSimd = WIDE;     \
    explicit NAME(const Node&) {}               \
    template <class C>                          \
    C operator()(C x) const {                   \
      return EXPR;                              \
    }                                           \
  };
#define KILN_FLOAT_UNARY(NAME, EXPR) KILN_FLOAT_UNARY_IMPL(NAME, false, EXPR)
#define KILN_FLOAT_UNARY_WIDE(NAME, EXPR) KILN_FLOAT_UNARY_IMPL(NAME, true, EXPR)

KILN_FLOAT_UNARY_WIDE(ExpOp, expAny(x))
KILN_FLOAT_UNARY(Expm1Op, std::expm1(x))
KILN_FLOAT_UNARY(LogOp, std::log(x))
KILN_FLOAT_UNARY(Log1pOp, std::log1p(x))
KILN_FLOAT_UNARY(SqrtOp, std::sqrt(x))
KILN_FLOAT_UNARY(RsqrtOp, C(1) / std::sqrt(x))
KILN_FLOAT_UNARY(ReciprocalOp, C(1) / x)
KILN_FLOAT_UNARY(SinOp, std::sin(x))
KILN_FLOAT_UNARY(CosOp, std::cos(x))
KILN_FLOAT_UNARY_WIDE(TanhOp, tanhAny(x))
KILN_FLOAT_UNARY_WIDE(SigmoidOp, C(1) / (C(1) + expAny(-x)))
KILN_FLOAT_UNARY_WIDE(ErfOp, erfAny(x))
KILN_FLOAT_UNARY(FloorOp, std::floor(x))
KILN_FLOAT_UNARY(CeilOp, std::ceil(x))
KILN_FLOAT_UNARY(RoundOp, std::nearbyint(x))  // half to even in the default rounding mode
KILN_FLOAT_UNARY_WIDE(SiluOp, x / (C(1) + expAny(-x)))
KILN_FLOAT_UNARY(MishOp, x* std::tanh(std::log1p(std::exp(x))))
KILN_FLOAT_UNARY(HardswishOp, x* clampSelect(x + C(3), C(0), C(6)) / C(6))
KILN_FLOAT_UNARY(HardsigmoidOp, clampSelect(x + C(3), C(0), C(6)) / C(6))
#undef KILN_FLOAT_UNARY
#undef KILN_FLOAT_UNARY_WIDE
#undef KILN_FLOAT_UNARY_IMPL

/// gelu's `approximate`: true for "tanh", false for "none"; anything else fails.
inline bool geluTanh(const Node& n) {
  const std::string& a = n.s("approximate");
  if (a != "none" && a != "tanh") opFail(n, "approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
  return a == "tanh";
}

/// gelu in one form, a type per form: with both forms behind a runtime flag
/// GCC vectorized neither (gelu-tanh ran 7x slower than PyTorch's). Pick the
/// type with geluTanh(n). f32's erf is erfVec, PyTorch's formula.
template <bool kTanh>
struct GeluOp {
  static constexpr bool kWideSimd = true;
  explicit GeluOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (kTanh) {
      const C beta = C(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = C(0.044715);
      C inner = beta * (x + kappa * (x * x * x));
      return C(0.5) * x * (C(1) + tanhAny(inner));
    } else {
      return x * C(0.5) * (C(1) + erfAny(x * C(M_SQRT1_2)));
    }
  }
};

/// clamp and hardtanh: NaN stays NaN; min > max gives max (torch.clamp).
struct ClampOp {
  double lo, hi;
  explicit ClampOp(const Node& n)
      : lo(n.f(n.is(Op::hardtanh) ? "min_val" : "min")), hi(n.f(n.is(Op::hardtanh) ? "max_val" : "max")) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return clampSelect(x, C(lo), C(hi));
    } else {
      // Integers clamp to the bounds rounded inwards and saturated to C's range.
      auto bound = [](double v, bool up) {
        constexpr double kMin = static_cast<double>(std::numeric_limits<C>::lowest());
        constexpr double kMax = static_cast<double>(std::numeric_limits<C>::max());
        v = up ? std::ceil(v) : std::floor(v);
        if (v <= kMin) return std::numeric_limits<C>::lowest();
        if (v >= kMax) return std::numeric_limits<C>::max();
        return static_cast<C>(v);
      };
      const C l = bound(lo, true), h = bound(hi, false);
      return std::min(std::max(x, l), h);
    }
  }
};

struct LeakyReluOp {
  double slope;
  explicit LeakyReluOp(const Node& n) : slope(n.f("negative_slope")) {}
  template <class C>
  C operator()(C x) const {
    return x > C(0) ? x : x * C(slope);
  }
};

struct EluOp {
  double alpha;
  explicit EluOp(const Node& n) : alpha(n.f("alpha")) {}
  template <class C>
  C operator()(C x) const {
    return x <= C(0) ? std::expm1(x) * C(alpha) : x;
  }
};

/// Linear above threshold (in beta * x) to avoid overflow, as F.softplus.
struct SoftplusOp {
  double beta, threshold;
  explicit SoftplusOp(const Node& n) : beta(n.f("beta")), threshold(n.f("threshold")) {}
  template <class C>
  C operator()(C x) const {
    return x * C(beta) > C(threshold) ? x : std::log1p(std::exp(x * C(beta))) / C(beta);
  }
};

// Unary ops on every dtype (bool handled explicitly to keep the compiler quiet).
struct NegOp {
  explicit NegOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>)
      return x;
    else
      return static_cast<C>(-x);
  }
};
struct AbsOp {
  explicit AbsOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return std::abs(x);
    else if constexpr (std::is_signed_v<C>)
      return static_cast<C>(x < 0 ? -x : x);
    else
      return x;
  }
};
struct ReluOp {  // x < 0 ? 0 : x keeps NaN, as clamp_min(x, 0)
  explicit ReluOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(0) : x;
  }
};
struct SignOp {  // (0 < x) - (x < 0): sign(NaN) is 0, as in PyTorch's CPU kernel
  explicit SignOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>)
      return static_cast<C>(x != 0);
    else
      return static_cast<C>((C(0) < x) - (x < C(0)));
  }
};

}  // namespace kiln::cpu
