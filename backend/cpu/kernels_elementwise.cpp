// Reference CPU kernels for the elementwise op family (core/ops/elementwise.cpp):
// binary arithmetic, comparisons and logical ops with broadcasting, `where`,
// `cast`, and unary math/activations. Semantics follow PyTorch's CPU kernels,
// down to the order of operations where that changes rounding (hardswish,
// gelu, floor division), so results match libtorch to an ulp or two.
//
// Inputs are converted to the computation dtype first (the output dtype for
// arithmetic, the promoted input dtype for comparisons); half types compute in
// float. The inner loops have unit-stride and scalar-operand variants the
// compiler vectorizes (f32 exp and the clamps use cpu_math.h's branch-free
// forms so they vectorize too); big tensors are split across OpenMP threads.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/unary_ops.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

// ---- binary loop -----------------------------------------------------------

/// One run of a binary op: po[i] = f(x[i * sx], y[i * sy]). The branches give
/// the vectorizer plain loops for the common cases: same shape, and one
/// operand constant along the run (a scalar or a broadcast bias).
template <class T, class R, class F>
KILN_SIMD_CLONES void binaryRun(R* po, const T* x, int64_t sx, const T* y, int64_t sy, int64_t n, F f) {
  if (sx == 1 && sy == 1) {
    for (int64_t i = 0; i < n; ++i) po[i] = f(x[i], y[i]);
  } else if (sx == 1 && sy == 0) {
    const T yv = *y;
    for (int64_t i = 0; i < n; ++i) po[i] = f(x[i], yv);
  } else if (sx == 0 && sy == 1) {
    const T xv = *x;
    for (int64_t i = 0; i < n; ++i) po[i] = f(xv, y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) po[i] = f(x[i * sx], y[i * sy]);
  }
}

/// out = f(a, b) with a and b broadcast to out's shape. T: input storage type,
/// R: output storage type.
template <class T, class R, class F>
void binaryLoop(Tensor& out, const Tensor& a, const Tensor& b, F f) {
  R* o = out.data<R>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  const Shape& s = out.shape();
  forEachStrided<3>(s, {contiguousStrides(s), broadcastStrides(a.shape(), s), broadcastStrides(b.shape(), s)},
                    [=](const int64_t* off, const int64_t* st, int64_t n) {
                      binaryRun(o + off[0], pa + off[1], st[1], pb + off[2], st[2], n, f);
                    });
}

/// Arithmetic on bool runs in int64 (true + true is true, as in PyTorch).
template <class T>
using arith_t = std::conditional_t<std::is_same_v<T, bool>, int64_t, compute_t<T>>;

// ---- binary arithmetic ops: apply(C a, C b) on the computation type C ------

struct AddOp {
  template <class C>
  static C apply(C a, C b) {
    return a + b;
  }
};
struct SubOp {
  template <class C>
  static C apply(C a, C b) {
    return a - b;
  }
};
struct MulOp {
  template <class C>
  static C apply(C a, C b) {
    return a * b;
  }
};
struct DivOp {  // the output (and so C) is always floating
  template <class C>
  static C apply(C a, C b) {
    return a / b;
  }
};

/// Python floor division. Floats: PyTorch's div_floor_floating (fmod based,
/// so floor_div(a, b) * b + remainder(a, b) == a holds closely).
struct FloorDivOp {
  static constexpr bool kIntegerDivision = true;
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      if (b == 0) return a / b;
      C mod = std::fmod(a, b);
      C div = (a - mod) / b;
      if (mod != 0 && (b < 0) != (mod < 0)) div -= C(1);
      if (div == 0) return std::copysign(C(0), a / b);
      C fl = std::floor(div);
      if (div - fl > C(0.5)) fl += C(1);
      return fl;
    } else {
      C q = a / b;
      if constexpr (std::is_signed_v<C>)
        if ((a < 0) != (b < 0) && q * b != a) --q;  // truncation rounded up: step down
      return q;
    }
  }
};

/// Python modulo: the result takes the sign of the divisor.
struct RemainderOp {
  static constexpr bool kIntegerDivision = true;
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      C mod = std::fmod(a, b);
      if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
      return mod;
    } else {
      C r = a % b;
      if constexpr (std::is_signed_v<C>)
        if (r != 0 && (r < 0) != (b < 0)) r += b;
      return r;
    }
  }
};

/// Floats: std::pow. Integers: exponentiation by squaring; negative exponents
/// give 0 except for bases 1 and -1 (PyTorch's powi).
struct PowOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      return std::pow(a, b);
    } else {
      if constexpr (std::is_signed_v<C>) {
        if (b < 0) {
          if (a == 1) return C(1);
          if (a == -1) return (b & 1) ? C(-1) : C(1);
          return C(0);
        }
      }
      C result = 1;
      while (b) {
        if (b & 1) result = static_cast<C>(result * a);
        a = static_cast<C>(a * a);
        b = static_cast<C>(b >> 1);
      }
      return result;
    }
  }
};

/// std::atan2 (integers arrive as floats: the op's result type is floating).
struct Atan2Op {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>)
      return std::atan2(a, b);
    else
      return static_cast<C>(std::atan2(static_cast<double>(a), static_cast<double>(b)));
  }
};

/// torch.xlogy: a * log(b), 0 where a == 0 unless b is NaN (integers arrive
/// as floats: the op's result type is floating).
struct XlogyOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(b)) return b;
      return a == C(0) ? C(0) : a * std::log(b);
    } else {
      return static_cast<C>(apply(static_cast<double>(a), static_cast<double>(b)));
    }
  }
};

/// NaN propagates from either side, as torch.maximum/minimum.
struct MaximumOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>)
      return maxNaN(a, b);
    else
      return a > b ? a : b;
  }
};
struct MinimumOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>)
      return minNaN(a, b);
    else
      return a < b ? a : b;
  }
};

template <class T>
void checkNoZeroDivisor(const Tensor& b) {
  const T* p = b.data<T>();
  for (int64_t i = 0, n = b.numel(); i < n; ++i)
    if (p[i] == T(0)) fail("integer division by zero (ZeroDivisionError in PyTorch)");
}

template <class Op>
constexpr bool kIntDiv = requires {
  Op::kIntegerDivision;
};

template <class Op>
void arithmeticKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const DType t = o.dtype();
  const Tensor a = asDType(in[0], t), b = asDType(in[1], t);
  dispatchAll(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = arith_t<T>;
    if constexpr (kIntDiv<Op> && !is_floating_v<T>) checkNoZeroDivisor<T>(b);
    binaryLoop<T, T>(o, a, b, [](T x, T y) { return convert<T>(Op::apply(C(x), C(y))); });
  });
}

// ---- comparisons and logical ops -> bool -----------------------------------

struct EqOp {
  template <class C>
  static bool apply(C a, C b) {
    return a == b;
  }
};
struct NeOp {
  template <class C>
  static bool apply(C a, C b) {
    return a != b;
  }
};
struct LtOp {
  template <class C>
  static bool apply(C a, C b) {
    return a < b;
  }
};
struct LeOp {
  template <class C>
  static bool apply(C a, C b) {
    return a <= b;
  }
};
struct GtOp {
  template <class C>
  static bool apply(C a, C b) {
    return a > b;
  }
};
struct GeOp {
  template <class C>
  static bool apply(C a, C b) {
    return a >= b;
  }
};

/// Comparisons run in the promoted dtype of the two inputs (i64 vs f32 compares as f32).
template <class Op>
void compareKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const DType t = promoteOperands(in[0].dtype(), in[0].rank() == 0, in[1].dtype(), in[1].rank() == 0);
  const Tensor a = asDType(in[0], t), b = asDType(in[1], t);
  dispatchAll(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    binaryLoop<T, bool>(o, a, b, [](T x, T y) { return Op::apply(C(x), C(y)); });
  });
}

struct AndOp {
  static bool apply(bool a, bool b) { return a && b; }
};
struct OrOp {
  static bool apply(bool a, bool b) { return a || b; }
};
struct XorOp {
  static bool apply(bool a, bool b) { return a != b; }
};

/// Logical ops look at each input's truthiness, so both convert to bool first.
template <class Op>
void logicalKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor a = asDType(in[0], DType::Bool), b = asDType(in[1], DType::Bool);
  binaryLoop<bool, bool>(o, a, b, [](bool x, bool y) { return Op::apply(x, y); });
}

/// One run of `where` as bit masks on the raw elements (U: an unsigned
/// integer of the element's size, exact for every dtype): no branch, so the
/// loop vectorizes. `c[i] ? a[i] : b[i]` compiled to a branch per element
/// (relu's unfused bf16 backward, where(x <= 0, 0, g), ran at a ninth of
/// relu's speed).
template <class U>
inline U pick(bool c, U a, U b) {
  const U m = static_cast<U>(U(0) - static_cast<U>(c));
  return static_cast<U>((a & m) | (b & static_cast<U>(~m)));
}

template <class U>
KILN_SIMD_CLONES void whereRun(U* __restrict po, const bool* c, int64_t sc, const U* a, int64_t sa, const U* b,
                               int64_t sb, int64_t n) {
  if (sc == 1 && sa == 0 && sb == 1) {
    const U av = *a;
    for (int64_t i = 0; i < n; ++i) po[i] = pick(c[i], av, b[i]);
  } else if (sc == 1 && sa == 1 && sb == 0) {
    const U bv = *b;
    for (int64_t i = 0; i < n; ++i) po[i] = pick(c[i], a[i], bv);
  } else if (sc == 1 && sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) po[i] = pick(c[i], a[i], b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) po[i] = pick(c[i * sc], a[i * sa], b[i * sb]);
  }
}

void whereKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const DType t = o.dtype();
  const Tensor& cond = in[0];
  const Tensor a = asDType(in[1], t), b = asDType(in[2], t);
  const Shape& s = o.shape();
  dispatchAll(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using U = std::conditional_t<
        sizeof(T) == 1, uint8_t,
        std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    static_assert(sizeof(U) == sizeof(T));
    U* po = reinterpret_cast<U*>(o.data<T>());
    const bool* pc = cond.data<bool>();
    const U* pa = reinterpret_cast<const U*>(a.data<T>());
    const U* pb = reinterpret_cast<const U*>(b.data<T>());
    forEachStrided<4>(s,
                      {contiguousStrides(s), broadcastStrides(cond.shape(), s), broadcastStrides(a.shape(), s),
                       broadcastStrides(b.shape(), s)},
                      [&](const int64_t* off, const int64_t* st, int64_t cnt) {
                        whereRun(po + off[0], pc + off[1], st[1], pa + off[2], st[2], pb + off[3], st[3], cnt);
                      });
  });
}

// ---- unary ops: functors built from the node, operator()(C x) -------------

template <class Op, bool kFloatOnly>
void unaryKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const Op op(n);
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* po = o.data<T>();
    parallelFor(x.numel(), kParallelGrain, [=](int64_t b, int64_t e) { unaryRun(px + b, po + b, e - b, op); });
  };
  if constexpr (kFloatOnly)
    dispatchFloating(x.dtype(), body);
  else
    dispatchAll(x.dtype(), body);
}

void geluKernel(const Node& n, Inputs in, Outputs out, KernelContext& ctx) {
  if (geluTanh(n))
    unaryKernel<GeluOp<true>, true>(n, in, out, ctx);
  else
    unaryKernel<GeluOp<false>, true>(n, in, out, ctx);
}

void logicalNotKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor b = asDType(in[0], DType::Bool);
  const bool* pb = b.data<bool>();
  bool* po = o.data<bool>();
  parallelFor(b.numel(), kParallelGrain, [pb, po](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) po[i] = !pb[i];
  });
}

void castKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  castInto(in[0], allocOutput(n, out, 0));
}

void add(KernelRegistry& r, const char* op, KernelFn fn) {
  KernelDef k{op, "cpu", std::string("cpu.") + op, 0, nullptr, fn};
  k.writes_over_input = true;  // every loop here reads index i of each input, then writes index i
  r.add(std::move(k));
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuElementwiseKernels(KernelRegistry& r) {
  using namespace cpu;
  add(r, "add", arithmeticKernel<AddOp>);
  add(r, "sub", arithmeticKernel<SubOp>);
  add(r, "mul", arithmeticKernel<MulOp>);
  add(r, "div", arithmeticKernel<DivOp>);
  add(r, "floor_div", arithmeticKernel<FloorDivOp>);
  add(r, "remainder", arithmeticKernel<RemainderOp>);
  add(r, "pow", arithmeticKernel<PowOp>);
  add(r, "maximum", arithmeticKernel<MaximumOp>);
  add(r, "minimum", arithmeticKernel<MinimumOp>);
  add(r, "atan2", arithmeticKernel<Atan2Op>);
  add(r, "xlogy", arithmeticKernel<XlogyOp>);
  add(r, "eq", compareKernel<EqOp>);
  add(r, "ne", compareKernel<NeOp>);
  add(r, "lt", compareKernel<LtOp>);
  add(r, "le", compareKernel<LeOp>);
  add(r, "gt", compareKernel<GtOp>);
  add(r, "ge", compareKernel<GeOp>);
  add(r, "logical_and", logicalKernel<AndOp>);
  add(r, "logical_or", logicalKernel<OrOp>);
  add(r, "logical_xor", logicalKernel<XorOp>);
  add(r, "where", whereKernel);

  add(r, "neg", unaryKernel<NegOp, false>);
  add(r, "abs", unaryKernel<AbsOp, false>);
  add(r, "relu", unaryKernel<ReluOp, false>);
  add(r, "sign", unaryKernel<SignOp, false>);
  add(r, "clamp", unaryKernel<ClampOp, false>);
  add(r, "logical_not", logicalNotKernel);
  add(r, "cast", castKernel);

  add(r, "exp", unaryKernel<ExpOp, true>);
  add(r, "expm1", unaryKernel<Expm1Op, true>);
  add(r, "log", unaryKernel<LogOp, true>);
  add(r, "log1p", unaryKernel<Log1pOp, true>);
  add(r, "sqrt", unaryKernel<SqrtOp, true>);
  add(r, "rsqrt", unaryKernel<RsqrtOp, true>);
  add(r, "reciprocal", unaryKernel<ReciprocalOp, true>);
  add(r, "sin", unaryKernel<SinOp, true>);
  add(r, "cos", unaryKernel<CosOp, true>);
  add(r, "tanh", unaryKernel<TanhOp, true>);
  add(r, "sigmoid", unaryKernel<SigmoidOp, true>);
  add(r, "erf", unaryKernel<ErfOp, true>);
  add(r, "floor", unaryKernel<FloorOp, true>);
  add(r, "ceil", unaryKernel<CeilOp, true>);
  add(r, "round", unaryKernel<RoundOp, true>);
  add(r, "silu", unaryKernel<SiluOp, true>);
  add(r, "mish", unaryKernel<MishOp, true>);
  add(r, "hardswish", unaryKernel<HardswishOp, true>);
  add(r, "hardsigmoid", unaryKernel<HardsigmoidOp, true>);
  add(r, "gelu", geluKernel);
  add(r, "hardtanh", unaryKernel<ClampOp, true>);
  add(r, "leaky_relu", unaryKernel<LeakyReluOp, true>);
  add(r, "elu", unaryKernel<EluOp, true>);
  add(r, "softplus", unaryKernel<SoftplusOp, true>);
}

}  // namespace kiln
