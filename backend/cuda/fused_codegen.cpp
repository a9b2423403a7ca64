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

#include "backend/cuda/device_math_source.h"
#include "core/ops/op_helpers.h"
#include "core/text_ir.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = kPlanThreads;  // the generated kernels launch as the one-op plan says

// ---- the prelude: every fusible op's math -------------------------------------

/// The generated source starts with device_math.cuh (embedded at build time:
/// the one-op kernels' formulas, so a fused chain computes what the chain of
/// one-op kernels does). NVRTC compiles with --fmad=false, so no product and
/// sum are ever contracted into an FMA (the CPU builds with
/// -ffp-contract=off).
constexpr const char* kPrelude = R"CUDA(// Kiln fused kernel (backend/cuda/fused_codegen.cpp): generated, do not edit.
typedef unsigned char kiln_u8;
typedef unsigned short kiln_bf16;  // bf16 bits (no cuda_bf16.h: NVRTC has no include path here)
__device__ __forceinline__ float kiln_bf16_load(kiln_bf16 b) { return __uint_as_float((unsigned)b << 16); }
// float -> bf16, round to nearest even: what __float2bfloat16_rn (the one-op
// kernels' store) does, cvt.rn.bf16.f32 on sm_80+, the same rounding by hand
// before (NaN -> 0x7fff as cuda_bf16.hpp's).
__device__ __forceinline__ kiln_bf16 kiln_bf16_store(float f) {
#if __CUDA_ARCH__ >= 800
  kiln_bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
#else
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (kiln_bf16)0x7fff;
  return (kiln_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}
// A bf16 body value: computed in float, rounded as the one-op kernel's bf16 output is.
__device__ __forceinline__ float kiln_bf16_round(float f) { return kiln_bf16_load(kiln_bf16_store(f)); }
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
      "abs",        "expm1",     "clamp",       "hardtanh", "log1p",      "sqrt", "rsqrt",
      "reciprocal", "sin",       "cos",         "tanh",     "sigmoid",    "erf",  "silu",
      "mish",       "hardswish", "hardsigmoid", "gelu",     "leaky_relu", "elu",  "softplus"};
  return fns;
}

const std::set<std::string, std::less<>>& codegenOps() {
  static const std::set<std::string, std::less<>> ops = {
      "add",      "sub",   "mul",       "div",         "neg",        "where",
      "lt",       "le",    "gt",        "ge",          "eq",         "ne",
      "relu",     "gelu",  "tanh",      "sigmoid",     "silu",       "exp",
      "log",      "sqrt",  "rsqrt",     "abs",         "erf",        "leaky_relu",
      "hardtanh", "clamp", "hardswish", "hardsigmoid", "reciprocal", "unary_backward",
      "full",     "cast"};
  return ops;
}

bool isGeluTanh(const Node& n) {
  const std::string& a = n.s("approximate");
  if (a != "none" && a != "tanh") opFail(n, "approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
  return a == "tanh";
}

/// The node's body region, checked against its operands.
const Graph& checkedBody(const Node& n) {
  if (!n.is(Op::fused_elementwise) && !n.is(Op::fused_reduction))
    opFail(n, "the CUDA fused codegen runs fused_elementwise and fused_reduction nodes, not " + n.op());
  const Graph* g = &n.subgraph("body");
  if (g->inputs().size() != n.numInputs())
    opFail(n, "body takes " + std::to_string(g->inputs().size()) + " operands, the node has " +
                  std::to_string(n.numInputs()));
  if (g->outputs().empty()) opFail(n, "body returns nothing");
  return *g;
}

/// The dtypes a body reads and writes: f32, f64, bf16 (amp's activations,
/// computed in float, every bf16 value rounded) and bool.
bool isStorageType(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::Bool;
}

/// The float types a body's casts convert between (both computed as float).
bool isFloatStorage(DType t) { return t == DType::F32 || t == DType::BF16; }

/// The body's compute type: f64 when it holds f64 values (passes/fuse.cpp
/// never mixes them with f32 or bf16), else f32.
DType computeTypeOf(const Node& n, const Graph& body) {
  for (const Value* v : n.inputs())
    if (v->dtype() == DType::F64) return DType::F64;
  for (const GraphOutput& o : body.outputs())
    if (o.value->dtype() == DType::F64) return DType::F64;
  return DType::F32;
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
    case DType::BF16:
      return "kiln_bf16";
    default:
      fail("CUDA fused codegen: no storage type for " + std::string(dtypeName(t)));
  }
}

/// The expression computing body node `b` from its argument names.
std::string expression(const Node& b, const std::vector<std::string>& a) {
  const Op op = b.kind();
  auto bin = [&](const char* sym) { return a.at(0) + " " + sym + " " + a.at(1); };
  auto cmp = [&](const char* sym) { return "(" + a.at(0) + " " + sym + " " + a.at(1) + ") ? C(1) : C(0)"; };
  if (op == Op::add) return bin("+");
  if (op == Op::sub) return bin("-");
  if (op == Op::mul) return bin("*");
  if (op == Op::div) return bin("/");
  if (op == Op::lt) return cmp("<");
  if (op == Op::le) return cmp("<=");
  if (op == Op::gt) return cmp(">");
  if (op == Op::ge) return cmp(">=");
  if (op == Op::eq) return cmp("==");
  if (op == Op::ne) return cmp("!=");
  if (op == Op::where) return a.at(0) + " != C(0) ? " + a.at(1) + " : " + a.at(2);
  if (op == Op::cast) {  // f32 <-> bf16: the value (rounded by the caller when the cast is to bf16)
    const DType from = b.input(0)->dtype(), to = b.output()->dtype();
    if (from != to && !(isFloatStorage(from) && isFloatStorage(to)))
      opFail(b, "the CUDA fused codegen casts between f32 and bf16 only");
    return a.at(0);
  }
  if (op == Op::full) return "C(" + literal(b.f("value")) + ")";
  if (op == Op::gelu) return std::string(isGeluTanh(b) ? "op_gelu_tanh" : "op_gelu_none") + "(" + a.at(0) + ")";
  if (op == Op::leaky_relu) return "op_leaky_relu(" + a.at(0) + ", " + literal(b.f("negative_slope")) + ")";
  if (op == Op::hardtanh)
    return "op_clamp(" + a.at(0) + ", " + literal(b.f("min_val")) + ", " + literal(b.f("max_val")) + ")";
  if (op == Op::clamp) return "op_clamp(" + a.at(0) + ", " + literal(b.f("min")) + ", " + literal(b.f("max")) + ")";
  if (op == Op::unary_backward) {
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
  if (unary.count(b.op())) return "op_" + b.op() + "(" + a.at(0) + ")";
  opFail(b, "the CUDA fused codegen cannot run '" + b.op() + "' in a body");
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
    else if (o.dtype == DType::BF16)
      s << "  const C " << n << " = kiln_bf16_load(" << read << ");\n";
    else
      s << "  const C " << n << " = C(" << read << ");\n";
  }
  int next = 0;
  for (const auto& b : body.nodes()) {
    std::vector<std::string> args;
    for (const Value* v : b->inputs()) args.push_back(name.at(v));
    const std::string n = "v" + std::to_string(next++);
    // A bf16 value is rounded where the one-op kernel would store it.
    const bool round = b->numOutputs() == 1 && b->output()->dtype() == DType::BF16;
    const std::string e = expression(*b, args);
    s << "  const C " << n << " = " << (round ? "kiln_bf16_round(" + e + ")" : e) << ";  // " << b->op() << "\n";
    for (const Value* o : b->outputs()) name[o] = n;
  }
  const auto& outs = body.outputs();
  for (size_t k = first_store; k < outs.size(); ++k) {
    const std::string& v = name.at(outs[k].value);
    if (l.outputs[k] == DType::Bool)
      s << "  p.out" << k << "[i] = " << v << " != C(0) ? 1 : 0;\n";
    else if (l.outputs[k] == DType::BF16)
      s << "  p.out" << k << "[i] = kiln_bf16_store(" << v << ");  // exact: already rounded\n";
    else
      s << "  p.out" << k << "[i] = (" << storageType(l.outputs[k]) << ")" << v << ";\n";
  }
  s << "  return " << name.at(outs[0].value) << ";\n}\n";
  return s.str();
}

}  // namespace

bool fusedCodegenSupports(const Node& b) {
  if (!codegenOps().count(b.op())) return false;
  if (b.is(Op::unary_backward)) return gradFns().count(b.s("fn")) > 0;
  return true;
}

DType fusedComputeType(const Node& n) {
  return computeTypeOf(n, checkedBody(n));
}

std::vector<OperandKind> fusedOperandKinds(const Node& n, const Shape& loop) {
  const int64_t total = numelOf(loop);
  std::vector<OperandKind> ops(n.numInputs());
  for (size_t k = 0; k < n.numInputs(); ++k) {
    const TensorType& t = n.input(k)->type();
    OperandKind& o = ops[k];
    if (!isStorageType(t.dtype))
      opFail(n, "operand " + std::to_string(k) + " is " + t.str() +
                    ": the CUDA fused codegen reads f32, f64, bf16 and bool");
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
  const Graph& body = checkedBody(n);
  FusedLayout l;
  l.reduction = n.is(Op::fused_reduction);
  for (const auto& b : body.nodes())
    if (!fusedCodegenSupports(*b))
      opFail(n, "the CUDA fused codegen cannot run '" + b->op() +
                    (b->is(Op::unary_backward) ? " fn=" + b->s("fn") : std::string()) + "' in a body");
  l.loop = body.outputs()[0].value->shape();
  l.numel = numelOf(l.loop);
  l.compute = computeTypeOf(n, body);
  l.operands = fusedOperandKinds(n, l.loop);
  for (const GraphOutput& o : body.outputs()) {
    const DType t = o.value->dtype();
    if (!isStorageType(t))
      opFail(n, "body output " + o.name + " is " + o.value->type().str() +
                    ": the CUDA fused codegen writes f32, f64, bf16 and bool");
    l.outputs.push_back(t);
  }
  int64_t largest = l.numel;
  if (l.reduction) {
    const std::string& r = n.s("reduce");
    if (r != "sum" && r != "mean") opFail(n, "reduce is '" + r + "', expected sum or mean");
    if (l.outputs[0] != l.compute)  // passes/fuse.cpp never reduces bf16 values
      opFail(n, "reduces " + std::string(dtypeName(l.outputs[0])) + " in " + std::string(dtypeName(l.compute)) +
                    " (fused reductions sum f32 or f64)");
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
  const Graph& body = checkedBody(n);
  if (l.operands.size() != body.inputs().size() || l.outputs.size() != body.outputs().size())
    opFail(n, "the fused layout does not match the body");
  if (l.compute != DType::F32 && l.compute != DType::F64)
    opFail(n, "the CUDA fused codegen computes in f32 or f64, not " + std::string(dtypeName(l.compute)));
  std::ostringstream s;
  s << kDeviceMathSource << "\nusing namespace kiln_device;\n"
    << kPrelude << "\n// ---- this node: "
    << (l.reduction ? (l.mean ? "fused_reduction (mean)" : "fused_reduction (sum)") : "fused_elementwise") << " ----\n";
  s << "typedef " << storageType(l.compute) << " C;  // the compute type (bf16 values: rounded float)\n";
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
