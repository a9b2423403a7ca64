// CUDA C++ generation for fused nodes: see fused_codegen.h.
#include "backend/cuda/fused_codegen.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/ops/op_helpers.h"
#include "core/text_ir.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = kPlanThreads;  // the generated kernels launch as the one-op plan says

// ---- the prelude: every fusible op's math, kernels_elementwise.cu's formulas --

/// Copied from kernels_elementwise.cu (device math, expVec/tanhVec, the
/// unary functors and unary_backward's gradients), with overloads for float
/// and double instead of `if constexpr` on type traits (no <type_traits>
/// here). The order of operations is the CPU's; NVRTC compiles with
/// --fmad=false, so no product and sum are ever contracted into an FMA
/// (the CPU builds with -ffp-contract=off); the one-op kernels' explicit
/// fmul/fadd/fsub roundings are kept, as kmul/kadd/ksub.
constexpr const char* kPrelude = R"CUDA(// Kiln fused kernel (backend/cuda/fused_codegen.cpp): generated, do not edit.
typedef unsigned char kiln_u8;

// ---- device math (kernels_elementwise.cu) ----
__device__ __forceinline__ float mExp(float x) { return expf(x); }
__device__ __forceinline__ double mExp(double x) { return exp(x); }
__device__ __forceinline__ float mLog(float x) { return logf(x); }
__device__ __forceinline__ double mLog(double x) { return log(x); }
__device__ __forceinline__ float mLog1p(float x) { return log1pf(x); }
__device__ __forceinline__ double mLog1p(double x) { return log1p(x); }
__device__ __forceinline__ float mSqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double mSqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float mSin(float x) { return sinf(x); }
__device__ __forceinline__ double mSin(double x) { return sin(x); }
__device__ __forceinline__ float mCos(float x) { return cosf(x); }
__device__ __forceinline__ double mCos(double x) { return cos(x); }
__device__ __forceinline__ float mTanh(float x) { return tanhf(x); }
__device__ __forceinline__ double mTanh(double x) { return tanh(x); }
__device__ __forceinline__ float mErf(float x) { return erff(x); }
__device__ __forceinline__ double mErf(double x) { return erf(x); }
__device__ __forceinline__ float mFabs(float x) { return fabsf(x); }
__device__ __forceinline__ double mFabs(double x) { return fabs(x); }

// a * b, a + b, a - b rounded separately (never an FMA): kernels_elementwise.cu's
// fmul/fadd/fsub, renamed clear of C23's fadd/fsub/fmul in <math.h>.
__device__ __forceinline__ float kmul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double kmul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float kadd(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double kadd(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float ksub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double ksub(double a, double b) { return __dsub_rn(a, b); }

// cpu_math.h's expVec, operation for operation (Cephes' polynomial).
__device__ __forceinline__ float expVec(float x) {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float fn = __fsub_rn(__fadd_rn(__fmul_rn(xc, 1.44269504088896341f), 12582912.0f), 12582912.0f);
  float r = __fsub_rn(xc, __fmul_rn(fn, 0.693359375f));
  r = __fsub_rn(r, __fmul_rn(fn, -2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
  const int n = static_cast<int>(fn), n1 = n >> 1, n2 = n - n1;
  const float y = __fmul_rn(__fmul_rn(p, __int_as_float((n1 + 127) << 23)), __int_as_float((n2 + 127) << 23));
  return x != x ? x : y;
}

// cpu_math.h's tanhVec (Cephes' tanhf), operation for operation.
__device__ __forceinline__ float tanhVec(float x) {
  const float a = fabsf(x);
  const float z = __fmul_rn(x, x);
  float p = -5.70498872745e-3f;
  p = __fadd_rn(__fmul_rn(p, z), 2.06390887954e-2f);
  p = __fsub_rn(__fmul_rn(p, z), 5.37397155531e-2f);
  p = __fadd_rn(__fmul_rn(p, z), 1.33314422036e-1f);
  p = __fsub_rn(__fmul_rn(p, z), 3.33332819422e-1f);
  const float small = __fadd_rn(__fmul_rn(__fmul_rn(p, z), x), x);
  const float big = __fsub_rn(1.0f, __fdiv_rn(2.0f, __fadd_rn(expVec(__fmul_rn(2.0f, a)), 1.0f)));
  const float r = copysignf(a < 0.625f ? small : big, x);
  return x != x ? x : r;
}

__device__ __forceinline__ float expAny(float x) { return expVec(x); }
__device__ __forceinline__ double expAny(double x) { return exp(x); }
__device__ __forceinline__ float tanhAny(float x) { return tanhVec(x); }
__device__ __forceinline__ double tanhAny(double x) { return tanh(x); }

// cpu_math.h's clampSelect: lo first (lo > hi gives hi), NaN stays NaN.
template <class C>
__device__ __forceinline__ C clampSel(C x, C lo, C hi) {
  const C t = x < lo ? lo : x;
  return t > hi ? hi : t;
}

// The <cmath> constants the CPU formulas use, spelled out (same doubles).
#define KILN_SQRT2 1.41421356237309504880
#define KILN_2_SQRTPI 1.12837916709551257390
#define KILN_SQRT1_2 0.70710678118654752440

// ---- the unary ops (unary_ops.h; kernels_elementwise.cu's *M functors) ----
template <class C> __device__ __forceinline__ C op_neg(C x) { return -x; }
template <class C> __device__ __forceinline__ C op_abs(C x) { return mFabs(x); }
template <class C> __device__ __forceinline__ C op_relu(C x) { return x < C(0) ? C(0) : x; }
template <class C> __device__ __forceinline__ C op_exp(C x) { return expAny(x); }
template <class C> __device__ __forceinline__ C op_log(C x) { return mLog(x); }
template <class C> __device__ __forceinline__ C op_sqrt(C x) { return mSqrt(x); }
template <class C> __device__ __forceinline__ C op_rsqrt(C x) { return C(1) / mSqrt(x); }
template <class C> __device__ __forceinline__ C op_reciprocal(C x) { return C(1) / x; }
template <class C> __device__ __forceinline__ C op_tanh(C x) { return tanhAny(x); }
template <class C> __device__ __forceinline__ C op_sigmoid(C x) { return C(1) / (C(1) + expAny(-x)); }
template <class C> __device__ __forceinline__ C op_erf(C x) { return mErf(x); }
template <class C> __device__ __forceinline__ C op_silu(C x) { return x / (C(1) + expAny(-x)); }
template <class C> __device__ __forceinline__ C op_hardswish(C x) { return x * clampSel(x + C(3), C(0), C(6)) / C(6); }
template <class C> __device__ __forceinline__ C op_hardsigmoid(C x) { return clampSel(x + C(3), C(0), C(6)) / C(6); }
template <class C> __device__ __forceinline__ C op_gelu_tanh(C x) {
  const C beta = C(KILN_SQRT2 * KILN_2_SQRTPI * 0.5), kappa = C(0.044715);
  const C inner = beta * kadd(x, kmul(kappa, x * x * x));
  return C(0.5) * x * (C(1) + tanhAny(inner));
}
template <class C> __device__ __forceinline__ C op_gelu_none(C x) {
  return x * C(0.5) * (C(1) + mErf(x * C(KILN_SQRT1_2)));
}
// clamp and hardtanh: NaN stays NaN; min > max gives max.
template <class C> __device__ __forceinline__ C op_clamp(C x, double lo, double hi) { return clampSel(x, C(lo), C(hi)); }
template <class C> __device__ __forceinline__ C op_leaky_relu(C x, double slope) { return x > C(0) ? x : x * C(slope); }

// ---- unary_backward (kernels_elementwise_grad.cpp; kernels_elementwise.cu's *G) ----
// g: the incoming gradient; v: the forward input x, or its output y for
// sqrt, rsqrt, reciprocal, tanh and sigmoid.
template <class C> __device__ __forceinline__ C grad_abs(C g, C v) { return g * C((C(0) < v) - (v < C(0))); }
template <class C> __device__ __forceinline__ C grad_log1p(C g, C v) { return g / (v + C(1)); }
template <class C> __device__ __forceinline__ C grad_sqrt(C g, C v) { return g / (C(2) * v); }
template <class C> __device__ __forceinline__ C grad_rsqrt(C g, C v) { return C(-0.5) * g * (v * v * v); }
template <class C> __device__ __forceinline__ C grad_reciprocal(C g, C v) { return -g * (v * v); }
template <class C> __device__ __forceinline__ C grad_sin(C g, C v) { return g * mCos(v); }
template <class C> __device__ __forceinline__ C grad_cos(C g, C v) { return g * -mSin(v); }
template <class C> __device__ __forceinline__ C grad_tanh(C g, C v) { return g * ksub(C(1), kmul(v, v)); }
template <class C> __device__ __forceinline__ C grad_sigmoid(C g, C v) { return g * ((C(1) - v) * v); }
template <class C> __device__ __forceinline__ C grad_erf(C g, C v) { return C(KILN_2_SQRTPI) * expAny(-(v * v)) * g; }
template <class C> __device__ __forceinline__ C grad_silu(C g, C v) {
  const C s = C(1) / (C(1) + expAny(-v));
  return g * s * kadd(C(1), kmul(v, C(1) - s));
}
template <class C> __device__ __forceinline__ C grad_mish(C g, C v) {
  const C s = C(1) / (C(1) + mExp(-v));
  const C t = mTanh(mLog1p(mExp(v)));
  return g * kadd(t, kmul(v * s, ksub(C(1), kmul(t, t))));
}
template <class C> __device__ __forceinline__ C grad_hardswish(C g, C v) {
  return v < C(-3) ? C(0) : (v <= C(3) ? g * (v / C(3) + C(0.5)) : g);
}
// PyTorch multiplies by the float constant 1.0f / 6.0f in every dtype.
template <class C> __device__ __forceinline__ C grad_hardsigmoid(C g, C v) {
  return (v > C(-3)) & (v < C(3)) ? g * C(1.0f / 6.0f) : C(0);
}
// clamp passes the gradient on min <= x <= max; hardtanh only strictly inside.
template <class C> __device__ __forceinline__ C grad_clamp(C g, C v, double lo, double hi) {
  return (v >= C(lo)) & (v <= C(hi)) ? g : C(0);
}
template <class C> __device__ __forceinline__ C grad_hardtanh(C g, C v, double lo, double hi) {
  return (v <= C(lo)) | (v >= C(hi)) ? C(0) : g;
}
template <class C> __device__ __forceinline__ C grad_gelu_tanh(C g, C x) {
  const C beta = C(KILN_SQRT2 * KILN_2_SQRTPI * 0.5), kappa = C(0.044715);
  const C x_sq = x * x, inner = beta * kadd(x, kmul(kappa, x_sq * x)), t = tanhAny(inner);
  const C left = C(0.5) * x, right = C(1) + t;
  const C right_derivative = left * ksub(C(1), kmul(t, t)) * (beta * kadd(C(1), kmul(C(3) * kappa, x_sq)));
  return g * kadd(kmul(C(0.5), right), right_derivative);
}
template <class C> __device__ __forceinline__ C grad_gelu_none(C g, C x) {
  const C cdf = C(0.5) * (C(1) + mErf(x * C(KILN_SQRT1_2)));
  const C pdf = C(KILN_2_SQRTPI * KILN_SQRT1_2 * 0.5) * expAny(x * x * C(-0.5));
  return g * kadd(cdf, kmul(x, pdf));
}
template <class C> __device__ __forceinline__ C grad_leaky_relu(C g, C x, double slope) {
  return x > C(0) ? g : g * C(slope);
}
template <class C> __device__ __forceinline__ C grad_elu(C g, C x, double alpha) {
  return x <= C(0) ? g * C(alpha) * expAny(x) : g;
}
template <class C> __device__ __forceinline__ C grad_softplus(C g, C x, double beta, double threshold) {
  const C z = expAny(x * C(beta));
  return x * C(beta) > C(threshold) ? g : g * z / (z + C(1));
}
)CUDA";

/// The reduction kernels (kernels_reduction.cu's rowReduceKernel,
/// colReduceKernel and finalizeKernel with SumOp/MeanOp), the input read
/// through kiln_body(). Needs C, I, kMulti, Params, kiln_body, kiln_finish.
constexpr const char* kRowReduce = R"CUDA(
extern "C" __global__ void __launch_bounds__(256) kiln_fused_reduce(const __grid_constant__ Params p) {
  __shared__ C sm[32];
  const int W = (int)p.W, tx = (int)threadIdx.x;
  const I item = (I)blockIdx.x * (I)p.H + (I)threadIdx.y;
  const I items = (I)p.outputs * (I)p.splits;
  C a = C(0);
  if (item < items) {
    const I splits = (I)p.splits, o = item / splits, s = item % splits;
    const I base = kiln_offset(o, (int)p.kept_n, p.kept_size, p.kept_stride);
    const I count = (I)p.count, chunk = (I)p.chunk, begin = s * chunk;
    const I end = count < begin + chunk ? count : begin + chunk;
    const I w = (I)W, inner = (I)p.inner;
    // Element t of the row: t itself, or through the other reduced runs.
#define KILN_AT(t) (kMulti ? base + kiln_offset((t) / inner, (int)p.red_n, p.red_size, p.red_stride) + (t) % inner : base + (t))
    I t = begin + (I)tx;
    for (; t + 3 * w < end; t += 4 * w) {
      const C v0 = kiln_body(p, KILN_AT(t)), v1 = kiln_body(p, KILN_AT(t + w));
      const C v2 = kiln_body(p, KILN_AT(t + 2 * w)), v3 = kiln_body(p, KILN_AT(t + 3 * w));
      a += v0;
      a += v1;
      a += v2;
      a += v3;
    }
    for (; t < end; t += w) a += kiln_body(p, KILN_AT(t));
#undef KILN_AT
  }
  // The W threads of each item: a shuffle tree, then the warps' partials in order.
  const int width = W < 32 ? W : 32;
  for (int off = width / 2; off > 0; off /= 2) a += __shfl_down_sync(0xffffffffu, a, off, width);
  if (W > 32) {
    const int warps = W / 32, lane = tx % 32, wid = tx / 32;
    if (lane == 0) sm[threadIdx.y * warps + wid] = a;
    __syncthreads();
    if (tx == 0)
      for (int k = 1; k < warps; ++k) a += sm[threadIdx.y * warps + k];
  }
  if (tx == 0 && item < items) {
    if (p.splits == 1)
      p.out0[item] = kiln_finish(a, p.count);
    else
      p.partial[item] = a;
  }
}
)CUDA";

constexpr const char* kColReduce = R"CUDA(
extern "C" __global__ void __launch_bounds__(256) kiln_fused_reduce(const __grid_constant__ Params p) {
  __shared__ C sm[256];
  const int bx = (int)p.W, by = (int)p.H, tx = (int)threadIdx.x, ty = (int)threadIdx.y;
  const I b = (I)blockIdx.x, splits = (I)p.splits, xtiles = (I)p.xtiles;
  const I s = b % splits, rest = b / splits, xt = rest % xtiles, pp = rest / xtiles;
  const I i = xt * (I)bx + (I)tx, inner = (I)p.inner;
  C a = C(0);
  if (i < inner) {
    const I base = kiln_offset(pp, (int)p.kept_n, p.kept_size, p.kept_stride) + i;
    const I count = (I)p.count, chunk = (I)p.chunk, begin = s * chunk;
    const I end = count < begin + chunk ? count : begin + chunk;
    const I h = (I)by, rstride = (I)p.red_stride[0];
    // Row r of the reduced extent.
#define KILN_AT(r) (kMulti ? base + kiln_offset((r), (int)p.red_n, p.red_size, p.red_stride) : base + (r) * rstride)
    I r = begin + (I)ty;
    for (; r + 3 * h < end; r += 4 * h) {
      const C v0 = kiln_body(p, KILN_AT(r)), v1 = kiln_body(p, KILN_AT(r + h));
      const C v2 = kiln_body(p, KILN_AT(r + 2 * h)), v3 = kiln_body(p, KILN_AT(r + 3 * h));
      a += v0;
      a += v1;
      a += v2;
      a += v3;
    }
    for (; r < end; r += h) a += kiln_body(p, KILN_AT(r));
#undef KILN_AT
  }
  // Halving tree over y in shared memory.
  sm[ty * bx + tx] = a;
  __syncthreads();
  for (int half = by / 2; half > 0; half /= 2) {
    if (ty < half) {
      C v = sm[ty * bx + tx];
      v += sm[(ty + half) * bx + tx];
      sm[ty * bx + tx] = v;
    }
    __syncthreads();
  }
  if (ty == 0 && i < inner) {
    const I o = pp * inner + i;
    if (splits == 1)
      p.out0[o] = kiln_finish(sm[tx], p.count);
    else
      p.partial[o * splits + s] = sm[tx];
  }
}
)CUDA";

constexpr const char* kFinalize = R"CUDA(
// One warp per output combines its splits' partials in a fixed order.
extern "C" __global__ void __launch_bounds__(256) kiln_fused_finalize(const __grid_constant__ Params p) {
  const I o = (I)blockIdx.x * (I)(256 / 32) + (I)(threadIdx.x / 32);
  const int lane = (int)(threadIdx.x % 32);
  const I outputs = (I)p.outputs, splits = (I)p.splits;
  C a = C(0);
  if (o < outputs)
    for (I k = (I)lane; k < splits; k += 32) a += p.partial[o * splits + k];
  for (int off = 16; off > 0; off /= 2) a += __shfl_down_sync(0xffffffffu, a, off, 32);
  if (lane == 0 && o < outputs) p.out0[o] = kiln_finish(a, p.count);
}
)CUDA";

// ---- body analysis -------------------------------------------------------------

const std::set<std::string, std::less<>>& gradFns() {
  // core/ops/elementwise_grad.cpp's kUnaryGradFns: every fn unary_backward takes.
  static const std::set<std::string, std::less<>> fns = {
      "abs",       "clamp",       "hardtanh", "log1p",      "sqrt", "rsqrt",   "reciprocal",
      "sin",       "cos",         "tanh",     "sigmoid",    "erf",  "silu",    "mish",
      "hardswish", "hardsigmoid", "gelu",     "leaky_relu", "elu",  "softplus"};
  return fns;
}

const std::set<std::string, std::less<>>& codegenOps() {
  static const std::set<std::string, std::less<>> ops = {
      "add",      "sub",   "mul",       "div",         "neg",        "where",
      "lt",       "le",    "gt",        "ge",          "eq",         "ne",
      "relu",     "gelu",  "tanh",      "sigmoid",     "silu",       "exp",
      "log",      "sqrt",  "rsqrt",     "abs",         "erf",        "leaky_relu",
      "hardtanh", "clamp", "hardswish", "hardsigmoid", "reciprocal", "unary_backward",
      "full"};
  return ops;
}

bool isGeluTanh(const Node& n) {
  const std::string& a = n.s("approximate");
  if (a != "none" && a != "tanh") opFail(n, "approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
  return a == "tanh";
}

Graph parseBody(const Node& n) {
  if (n.op() != "fused_elementwise" && n.op() != "fused_reduction")
    opFail(n, "the CUDA fused codegen runs fused_elementwise and fused_reduction nodes, not " + n.op());
  auto g = parseGraph(n.s("body"), n.op() + " body");
  if (!g) opFail(n, "body: " + g.error().message);
  if (g->inputs().size() != n.numInputs())
    opFail(n, "body takes " + std::to_string(g->inputs().size()) + " operands, the node has " +
                  std::to_string(n.numInputs()));
  if (g->outputs().empty()) opFail(n, "body returns nothing");
  return std::move(*g);
}

bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F64;
}

DType computeTypeOf(const Node& n, const Graph& body) {
  for (const Value* v : n.inputs())
    if (isFloat(v->dtype())) return v->dtype();
  const DType out0 = body.outputs()[0].value->dtype();
  return isFloat(out0) ? out0 : DType::F32;
}

// ---- source text ---------------------------------------------------------------

/// A double as an exact C++ expression: a hex float literal (C++17), or the
/// bits for inf and NaN.
std::string literal(double v) {
  char buf[64];
  if (std::isfinite(v)) {
    std::snprintf(buf, sizeof buf, "%a", v);
    std::string s = buf;
    char dec[40];
    std::snprintf(dec, sizeof dec, "%.17g", v);
    return "(" + s + " /* " + dec + " */)";
  }
  std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016llxll)",
                static_cast<unsigned long long>(std::bit_cast<uint64_t>(v)));
  return buf;
}

const char* storageType(DType t) {
  switch (t) {
    case DType::F32:
      return "float";
    case DType::F64:
      return "double";
    case DType::Bool:
      return "kiln_u8";
    default:
      fail("CUDA fused codegen: no storage type for " + std::string(dtypeName(t)));
  }
}

/// The expression computing body node `b` from its argument names.
std::string expression(const Node& b, const std::vector<std::string>& a) {
  const std::string& op = b.op();
  auto bin = [&](const char* sym) { return a.at(0) + " " + sym + " " + a.at(1); };
  auto cmp = [&](const char* sym) { return "(" + a.at(0) + " " + sym + " " + a.at(1) + ") ? C(1) : C(0)"; };
  if (op == "add") return bin("+");
  if (op == "sub") return bin("-");
  if (op == "mul") return bin("*");
  if (op == "div") return bin("/");
  if (op == "lt") return cmp("<");
  if (op == "le") return cmp("<=");
  if (op == "gt") return cmp(">");
  if (op == "ge") return cmp(">=");
  if (op == "eq") return cmp("==");
  if (op == "ne") return cmp("!=");
  if (op == "where") return a.at(0) + " != C(0) ? " + a.at(1) + " : " + a.at(2);
  if (op == "full") return "C(" + literal(b.f("value")) + ")";
  if (op == "gelu") return std::string(isGeluTanh(b) ? "op_gelu_tanh" : "op_gelu_none") + "(" + a.at(0) + ")";
  if (op == "leaky_relu") return "op_leaky_relu(" + a.at(0) + ", " + literal(b.f("negative_slope")) + ")";
  if (op == "hardtanh")
    return "op_clamp(" + a.at(0) + ", " + literal(b.f("min_val")) + ", " + literal(b.f("max_val")) + ")";
  if (op == "clamp") return "op_clamp(" + a.at(0) + ", " + literal(b.f("min")) + ", " + literal(b.f("max")) + ")";
  if (op == "unary_backward") {
    const std::string& fn = b.s("fn");
    const std::string args = a.at(0) + ", " + a.at(1);
    if (fn == "gelu") return std::string(isGeluTanh(b) ? "grad_gelu_tanh" : "grad_gelu_none") + "(" + args + ")";
    if (fn == "clamp") return "grad_clamp(" + args + ", " + literal(b.f("min")) + ", " + literal(b.f("max")) + ")";
    if (fn == "hardtanh")
      return "grad_hardtanh(" + args + ", " + literal(b.f("min_val")) + ", " + literal(b.f("max_val")) + ")";
    if (fn == "leaky_relu") return "grad_leaky_relu(" + args + ", " + literal(b.f("negative_slope")) + ")";
    if (fn == "elu") return "grad_elu(" + args + ", " + literal(b.f("alpha")) + ")";
    if (fn == "softplus")
      return "grad_softplus(" + args + ", " + literal(b.f("beta")) + ", " + literal(b.f("threshold")) + ")";
    if (gradFns().count(fn)) return "grad_" + fn + "(" + args + ")";
    opFail(b, "the CUDA fused codegen has no gradient for fn \"" + fn + "\"");
  }
  static const std::set<std::string, std::less<>> unary = {"neg",  "abs",       "relu",        "exp",       "log",
                                                           "sqrt", "rsqrt",     "tanh",        "sigmoid",   "erf",
                                                           "silu", "hardswish", "hardsigmoid", "reciprocal"};
  if (unary.count(op)) return "op_" + op + "(" + a.at(0) + ")";
  opFail(b, "the CUDA fused codegen cannot run '" + op + "' in a body");
}

/// 8-byte words in Params (packFusedParams writes them in the struct's order).
size_t paramWords(const FusedLayout& l) {
  size_t words = l.operands.size() + l.outputs.size() + 1;
  for (const OperandKind& k : l.operands) words += k.access == OperandKind::Access::Broadcast ? 2 : 0;
  if (l.reduction) words += 8 + 2 * (1 + 2 * FusedReducePlan::kMaxGroups) + 1;
  return words;
}

std::string paramsStruct(const FusedLayout& l) {
  std::ostringstream s;
  // No __restrict__ on the elementwise kernel's pointers: output 0 may be
  // an in-place operand's buffer (writes_over_input). A reduction's outputs
  // never alias its operands.
  const char* restrict = l.reduction ? " __restrict__" : "";
  s << "struct Params {\n";
  for (size_t k = 0; k < l.operands.size(); ++k)
    s << "  const " << storageType(l.operands[k].dtype) << "*" << restrict << " in" << k << ";\n";
  for (size_t k = 0; k < l.outputs.size(); ++k)
    s << "  " << (l.reduction && k == 0 ? "C" : storageType(l.outputs[k])) << "*" << restrict << " out" << k << ";\n";
  s << "  long long n;  // loop elements\n";
  for (size_t k = 0; k < l.operands.size(); ++k)
    if (l.operands[k].access == OperandKind::Access::Broadcast)
      s << "  long long inner" << k << ", period" << k << ";\n";
  if (l.reduction) {
    const int g = FusedReducePlan::kMaxGroups;
    s << "  long long outputs, count, inner, W, H, xtiles, splits, chunk;\n"
      << "  long long kept_n, kept_size[" << g << "], kept_stride[" << g << "];\n"
      << "  long long red_n, red_size[" << g << "], red_stride[" << g << "];\n"
      << "  C* __restrict__ partial;  // splits > 1: outputs * splits accumulators\n";
  }
  s << "};\n";
  s << "static_assert(sizeof(Params) == " << paramWords(l) * 8 << ", \"Params must match packFusedParams\");\n";
  return s.str();
}

/// kiln_body(p, i): every body value at loop index i; stores body outputs
/// first.. and returns output 0's value.
std::string bodyFunction(const FusedLayout& l, const Graph& body, size_t first_store) {
  std::ostringstream s;
  s << "__device__ __forceinline__ C kiln_body(const Params& p, const I i) {\n";
  std::unordered_map<const Value*, std::string> name;
  for (size_t k = 0; k < body.inputs().size(); ++k) {
    const OperandKind& o = l.operands[k];
    const std::string n = "x" + std::to_string(k);
    name[body.inputs()[k]] = n;
    std::string at;
    switch (o.access) {
      case OperandKind::Access::InPlace:
        at = "i";
        break;
      case OperandKind::Access::Splat:
        at = "0";
        break;
      case OperandKind::Access::Broadcast:
        at = "(i / (I)p.inner" + std::to_string(k) + ") % (I)p.period" + std::to_string(k);
        break;
    }
    const std::string read = "p.in" + std::to_string(k) + "[" + at + "]";
    if (o.dtype == DType::Bool)
      s << "  const C " << n << " = " << read << " != 0 ? C(1) : C(0);  // bool as 0/1\n";
    else
      s << "  const C " << n << " = C(" << read << ");\n";
  }
  int next = 0;
  for (const auto& b : body.nodes()) {
    std::vector<std::string> args;
    for (const Value* v : b->inputs()) args.push_back(name.at(v));
    const std::string n = "v" + std::to_string(next++);
    s << "  const C " << n << " = " << expression(*b, args) << ";  // " << b->op() << "\n";
    for (const Value* o : b->outputs()) name[o] = n;
  }
  const auto& outs = body.outputs();
  for (size_t k = first_store; k < outs.size(); ++k) {
    const std::string& v = name.at(outs[k].value);
    if (l.outputs[k] == DType::Bool)
      s << "  p.out" << k << "[i] = " << v << " != C(0) ? 1 : 0;\n";
    else
      s << "  p.out" << k << "[i] = (" << storageType(l.outputs[k]) << ")" << v << ";\n";
  }
  s << "  return " << name.at(outs[0].value) << ";\n}\n";
  return s.str();
}

}  // namespace

bool fusedCodegenSupports(const Node& b) {
  if (!codegenOps().count(b.op())) return false;
  if (b.op() == "unary_backward") return gradFns().count(b.s("fn")) > 0;
  return true;
}

DType fusedComputeType(const Node& n) {
  return computeTypeOf(n, parseBody(n));
}

std::vector<OperandKind> fusedOperandKinds(const Node& n, const Shape& loop) {
  const int64_t total = numelOf(loop);
  std::vector<OperandKind> ops(n.numInputs());
  for (size_t k = 0; k < n.numInputs(); ++k) {
    const TensorType& t = n.input(k)->type();
    OperandKind& o = ops[k];
    if (t.dtype != DType::F32 && t.dtype != DType::F64 && t.dtype != DType::Bool)
      opFail(n, "operand " + std::to_string(k) + " is " + t.str() + ": the CUDA fused codegen reads f32, f64 and bool");
    o.dtype = t.dtype;
    o.period = t.numel();
    if (o.period == 1) {
      o.access = OperandKind::Access::Splat;
    } else if (o.period == total) {
      o.access = OperandKind::Access::InPlace;
    } else {
      auto inner = broadcastRunInner(t.shape, loop);
      if (!inner)
        opFail(n, "operand " + t.str() + " does not broadcast to " + shapeStr(loop) + " along one run of dims");
      o.access = OperandKind::Access::Broadcast;
      o.inner = *inner;
    }
  }
  return ops;
}

FusedLayout analyzeFused(const Node& n) {
  const Graph body = parseBody(n);
  FusedLayout l;
  l.reduction = n.op() == "fused_reduction";
  for (const auto& b : body.nodes())
    if (!fusedCodegenSupports(*b))
      opFail(n, "the CUDA fused codegen cannot run '" + b->op() +
                    (b->op() == "unary_backward" ? " fn=" + b->s("fn") : std::string()) + "' in a body");
  l.loop = body.outputs()[0].value->shape();
  l.numel = numelOf(l.loop);
  l.compute = computeTypeOf(n, body);
  l.operands = fusedOperandKinds(n, l.loop);
  for (const GraphOutput& o : body.outputs()) {
    const DType t = o.value->dtype();
    if (t != DType::F32 && t != DType::F64 && t != DType::Bool)
      opFail(n, "body output " + o.name + " is " + o.value->type().str() +
                    ": the CUDA fused codegen writes f32, f64 and bool");
    l.outputs.push_back(t);
  }
  int64_t largest = l.numel;
  if (l.reduction) {
    const std::string& r = n.s("reduce");
    if (r != "sum" && r != "mean") opFail(n, "reduce is '" + r + "', expected sum or mean");
    if (l.outputs[0] != l.compute)
      opFail(n, "reduces " + std::string(dtypeName(l.outputs[0])) + " in " + std::string(dtypeName(l.compute)));
    l.mean = r == "mean";
    const auto axes = reductionAxes(n, n.is("dims"), static_cast<int64_t>(l.loop.size()));
    try {
      l.plan = makePlan(l.loop, axes);
    } catch (const KilnException& e) {
      opFail(n, e.what());
    }
    largest = std::max(largest, l.plan.outputs * l.plan.splits + kThreads);
    if (l.plan.blocks > std::numeric_limits<int32_t>::max())
      opFail(n, "the fused reduction needs " + std::to_string(l.plan.blocks) + " blocks, more than a grid holds");
  }
  l.wide_index = largest > std::numeric_limits<int32_t>::max();
  if (paramWords(l) > kMaxFusedParamWords)
    opFail(n, "too many operands and outputs (" + std::to_string(n.numInputs()) + " and " +
                  std::to_string(l.outputs.size()) + ") for one CUDA kernel's parameters");
  return l;
}

std::string fusedKernelSource(const Node& n, const FusedLayout& l) {
  const Graph body = parseBody(n);
  if (l.operands.size() != body.inputs().size() || l.outputs.size() != body.outputs().size())
    opFail(n, "the fused layout does not match the body");
  if (!isFloat(l.compute))
    opFail(n, "the CUDA fused codegen computes in f32 or f64, not " + std::string(dtypeName(l.compute)));
  std::ostringstream s;
  s << kPrelude << "\n// ---- this node: "
    << (l.reduction ? (l.mean ? "fused_reduction (mean)" : "fused_reduction (sum)") : "fused_elementwise") << " ----\n";
  s << "typedef " << storageType(l.compute) << " C;  // the compute type\n";
  s << "typedef " << (l.wide_index ? "unsigned long long" : "unsigned int") << " I;  // loop indices\n";
  s << paramsStruct(l);
  s << bodyFunction(l, body, l.reduction ? 1 : 0);
  if (!l.reduction) {
    s << R"CUDA(
extern "C" __global__ void __launch_bounds__(256) kiln_fused_elementwise(const __grid_constant__ Params p) {
  const I n = (I)p.n, stride = (I)gridDim.x * (I)blockDim.x;
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += stride) (void)kiln_body(p, i);
}
)CUDA";
    return s.str();
  }
  s << "constexpr bool kMulti = " << (l.plan.multi ? "true" : "false") << ";\n";
  s << "__device__ __forceinline__ C kiln_finish(C a, long long count) { return " << (l.mean ? "a / C(count)" : "a")
    << "; }\n";
  s << R"CUDA(// Offset of index idx over dims given innermost first.
__device__ __forceinline__ I kiln_offset(I idx, int n, const long long* size, const long long* stride) {
  I off = 0;
  for (int d = 0; d < n; ++d) {
    const I sz = (I)size[d];
    off += (idx % sz) * (I)stride[d];
    idx /= sz;
  }
  return off;
}
)CUDA";
  s << (l.plan.row ? kRowReduce : kColReduce) << kFinalize;
  return s.str();
}

std::string fusedKernelSource(const Node& n, DType compute, const std::vector<OperandKind>& operands) {
  FusedLayout l = analyzeFused(n);
  if (operands.size() != l.operands.size())
    opFail(n, "got " + std::to_string(operands.size()) + " operand kinds for " + std::to_string(l.operands.size()) +
                  " operands");
  l.compute = compute;
  l.operands = operands;
  return fusedKernelSource(n, l);
}

std::vector<std::string> fusedKernelNames(const FusedLayout& l) {
  if (l.reduction) return {"kiln_fused_reduce", "kiln_fused_finalize"};
  return {"kiln_fused_elementwise"};
}

std::vector<uint64_t> packFusedParams(const FusedLayout& l, std::span<const void* const> inputs,
                                      std::span<void* const> outputs, void* partial) {
  if (inputs.size() != l.operands.size() || outputs.size() != l.outputs.size())
    fail("packFusedParams: " + std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
         " outputs for a layout of " + std::to_string(l.operands.size()) + " and " + std::to_string(l.outputs.size()));
  std::vector<uint64_t> w;
  w.reserve(paramWords(l));
  auto ptr = [&](const void* p) { w.push_back(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); };
  auto num = [&](int64_t v) { w.push_back(static_cast<uint64_t>(v)); };
  for (const void* p : inputs) ptr(p);
  for (void* p : outputs) ptr(p);
  num(l.numel);
  for (const OperandKind& k : l.operands)
    if (k.access == OperandKind::Access::Broadcast) {
      num(k.inner);
      num(k.period);
    }
  if (l.reduction) {
    const FusedReducePlan& p = l.plan;
    for (int64_t v : {p.outputs, p.count, p.inner, int64_t{p.W}, int64_t{p.H}, p.xtiles, p.splits, p.chunk}) num(v);
    for (const FusedReducePlan::Dims* d : {&p.kept, &p.red}) {
      num(d->n);
      for (int64_t v : d->size) num(v);
      for (int64_t v : d->stride) num(v);
    }
    ptr(partial);
  }
  if (w.size() != paramWords(l)) fail("packFusedParams: packed " + std::to_string(w.size()) + " words, expected more");
  return w;
}

size_t fusedWorkspaceBytes(const FusedLayout& l) {
  if (!l.reduction || l.plan.splits <= 1) return 0;
  return static_cast<size_t>(l.plan.outputs * l.plan.splits) * (l.compute == DType::F64 ? 8 : 4);
}

}  // namespace kiln::cuda
