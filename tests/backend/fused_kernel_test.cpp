// The CPU fused_elementwise kernel against the one-op kernels: for every op
// the fuse pass may fuse (passes/fuse.h), a chain containing it is run
// unfused and fused, in f32, f64 and bf16 (the CPU's bodies round each bf16
// value as the one-op kernels round their outputs), over sizes that cover
// whole blocks, ragged tails and the multi-threaded split; the results must
// be equal bit for bit (the fused kernel runs the same functors in the same
// dtype).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/cpu_executor.h"
#include "core/text_ir.h"
#include "passes/fuse.h"

namespace kiln {
namespace {

/// The node text of `op` applied to %a (and %b, %c for more operands).
std::string opCall(const std::string& op) {
  if (op == "where") return "where(%c, %a, %b)";
  if (op == "unary_backward") return "unary_backward(%a, %b) {approximate=\"tanh\", fn=\"gelu\"}";
  if (op == "gelu") return "gelu(%a) {approximate=\"tanh\"}";
  if (op == "leaky_relu") return "leaky_relu(%a) {negative_slope=0.1}";
  if (op == "hardtanh") return "hardtanh(%a) {min_val=-0.5, max_val=0.75}";
  if (op == "clamp") return "clamp(%a) {min=-0.5, max=0.75}";
  static const std::set<std::string> binary = {"add", "sub", "mul", "div", "lt", "le", "gt", "ge", "eq", "ne"};
  return binary.count(op) ? op + "(%a, %b)" : op + "(%a)";
}

/// x -> mul(x, 0.5) -> OP -> (where of comparisons) -> add(y): a chain of at
/// least three fusible nodes around OP.
std::string chainGraph(const std::string& op, const std::string& t, int64_t n) {
  const std::string ty = t + "[" + std::to_string(n) + "]";
  const bool cmp = op == "lt" || op == "le" || op == "gt" || op == "ge" || op == "eq" || op == "ne";
  std::string s = "graph g(%x: " + ty + " data, %y: " + ty + " data, %m: bool[" + std::to_string(n) + "] data) {\n";
  s += "  %c = logical_not(%m) : bool[" + std::to_string(n) + "]\n";  // not fusible: an operand
  s += "  %h = full() {dtype=" + t + ", shape=[], value=0.5} : " + t + "[]\n";
  s += "  %a = mul(%x, %h) : " + ty + "\n";
  s += "  %b = sub(%y, %h) : " + ty + "\n";
  const std::string rt = cmp ? "bool[" + std::to_string(n) + "]" : ty;
  if (op == "cast") {  // there and back: f32 -> bf16 -> f32, bf16 -> f32 -> bf16 (f64: to itself)
    const std::string other = t == "f32" ? "bf16" : t == "bf16" ? "f32" : t;
    s += "  %r0 = cast(%a) {dtype=" + other + "} : " + other + "[" + std::to_string(n) + "]\n";
    s += "  %r = cast(%r0) {dtype=" + t + "} : " + ty + "\n";
  } else {
    s += "  %r = " + opCall(op) + " : " + rt + "\n";
  }
  if (cmp) {
    s += "  %s = where(%r, %a, %b) : " + ty + "\n";
  } else {
    s += "  %s = add(%r, %y) : " + ty + "\n";
  }
  s += "  %o = tanh(%s) : " + ty + "\n";
  s += "  return %o \"out\", %s \"mid\"\n}\n";
  return s;
}

std::vector<Tensor> run(const Graph& g, const TensorMap& in) {
  auto ex = CpuExecutor::create(g);
  EXPECT_TRUE(ex) << (ex ? "" : ex.error().message);
  auto out = ex->run(in);
  EXPECT_TRUE(out) << (out ? "" : out.error().message);
  return out ? *out : std::vector<Tensor>{};
}

/// Every graph input filled from `dist` (bool inputs: fair coin flips).
template <class Dist>
TensorMap randomInputs(const Graph& g, std::mt19937& rng, Dist& dist) {
  TensorMap in;
  for (const Value* v : g.inputs()) {
    Tensor t(v->type());
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, v->dtype() == DType::Bool ? double(rng() % 2) : dist(rng));
    in[v->name()] = t;
  }
  return in;
}

/// The fused run's outputs equal the unfused run's: same types, same bits.
void expectSameBits(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].type(), want[k].type()) << "output " << k;
    EXPECT_EQ(std::memcmp(got[k].data<void>(), want[k].data<void>(), want[k].bytes()), 0) << "output " << k << " differs";
  }
}

TEST(FusedKernel, EveryFusibleOpMatchesTheOneOpKernelsBitForBit) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-3, 3);
  for (const Op kind : fusibleOps()) {
    const std::string op(opName(kind));
    if (op == "full") continue;  // covered by %h in every chain
    for (const char* t : {"f32", "f64", "bf16"}) {
      for (int64_t n : {1, 511, 513, 70001}) {
        SCOPED_TRACE(op + " " + t + " n=" + std::to_string(n));
        auto g = parseGraph(chainGraph(op, t, n));
        ASSERT_TRUE(g) << g.error().message;
        const DType dt = *parseDType(t);
        TensorMap in;
        for (const char* name : {"x", "y"}) {
          Tensor v(TensorType{dt, {n}});
          for (int64_t i = 0; i < n; ++i)
            v.set(i, (op == "log" || op == "sqrt" || op == "rsqrt") ? std::abs(dist(rng)) + 0.6 : dist(rng));
          in[name] = v;
        }
        Tensor m(TensorType{DType::Bool, {n}});
        for (int64_t i = 0; i < n; ++i) m.set(i, static_cast<double>(rng() % 2));
        in["m"] = m;
        auto want = run(*g, in);
        PassContext ctx;
        auto r = runFuse(*g, ctx);
        ASSERT_TRUE(r) << r.error().message;
        ASSERT_EQ(r->statistics.at("groups"), 1) << printGraph(*g);
        size_t fused = 0;
        for (const auto& node : g->nodes()) fused += node->op() == "fused_elementwise";
        ASSERT_EQ(fused, 1u) << printGraph(*g);
        expectSameBits(run(*g, in), want);
      }
    }
  }
}

/// amp's attention scores, fused as the CUDA step fuses them: bf16 scores
/// scaled by a 0-dim f32 constant that bf16 cannot hold (the one-op mul
/// rounds it to bf16 first), masked with an f32 -inf, cast to f32 for the
/// softmax; and the backward's cast back to bf16, mask and scale. Bit for
/// bit against the one-op kernels, in one group each.
TEST(FusedKernel, AmpCastsAndF32ConstantsBesideBf16FuseBitForBit) {
  const char* text = R"(graph g(%s: bf16[2,3,40,40] data, %mask: bool[40,40] data, %gp: f32[2,3,40,40] data) {
  %c = full() {dtype=f32, shape=[], value=0.1} : f32[]
  %ninf = full() {dtype=f32, shape=[], value=-inf} : f32[]
  %z = full() {dtype=f32, shape=[], value=0.0} : f32[]
  %0 = mul(%s, %c) : bf16[2,3,40,40]
  %1 = where(%mask, %ninf, %0) : bf16[2,3,40,40]
  %2 = cast(%1) {dtype=f32} : f32[2,3,40,40]
  %3 = softmax(%2) {dim=3} : f32[2,3,40,40]
  %4 = cast(%gp) {dtype=bf16} : bf16[2,3,40,40]
  %5 = where(%mask, %z, %4) : bf16[2,3,40,40]
  %6 = mul(%5, %c) : bf16[2,3,40,40]
  return %3 "p", %6 "g"
})";
  auto g = parseGraph(text);
  ASSERT_TRUE(g) << g.error().message;
  std::mt19937 rng(11);
  std::normal_distribution<double> d(0, 2);
  const TensorMap in = randomInputs(*g, rng, d);
  auto want = run(*g, in);
  PassContext ctx;
  auto r = runFuse(*g, ctx);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->statistics.at("groups"), 2) << printGraph(*g);
  EXPECT_EQ(r->statistics.at("nodes_fused"), 6) << printGraph(*g);
  size_t full = 0;
  for (const auto& n : g->nodes()) full += n->op() == "full";
  EXPECT_EQ(full, 0u) << "constants copied into the bodies:\n" << printGraph(*g);
  expectSameBits(run(*g, in), want);
}

/// A one-element f32 constant of rank 1 promotes bf16 to f32 (it is not a
/// 0-dim scalar), and a cast to f64 leaves the float class: neither fuses
/// into a bf16 chain.
TEST(FusedKernel, PromotingConstantsAndF64CastsStayOutOfBf16Bodies) {
  const char* text = R"(graph g(%x: bf16[64] data) {
  %c = full() {dtype=f32, shape=[1], value=0.1} : f32[1]
  %0 = relu(%x) : bf16[64]
  %1 = mul(%0, %c) : f32[64]
  %2 = cast(%0) {dtype=f64} : f64[64]
  %3 = neg(%0) : bf16[64]
  return %1 "a", %2 "b", %3 "c"
})";
  auto g = parseGraph(text);
  ASSERT_TRUE(g) << g.error().message;
  PassContext ctx;
  auto r = runFuse(*g, ctx);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->statistics.at("nodes_fused"), 2) << printGraph(*g);  // relu and neg only
}

/// Broadcast operands (a bias, a [T, T] mask, a per-channel scale, a bool
/// mask) read by index inside the fused loop, against the one-op kernels.
TEST(FusedKernel, BroadcastRunOperandsMatchTheOneOpKernels) {
  const char* text = R"(graph g(%x: f32[3,4,5,6] data, %bias: f32[6] data, %mask: bool[5,6] data, %s: f32[4,1,1] data) {
  %z = full() {dtype=f32, shape=[], value=0.0} : f32[]
  %0 = add(%x, %bias) : f32[3,4,5,6]
  %1 = mul(%0, %s) : f32[3,4,5,6]
  %2 = where(%mask, %1, %z) : f32[3,4,5,6]
  %3 = gelu(%2) {approximate="none"} : f32[3,4,5,6]
  return %3 "out"
})";
  auto replaceAll = [](std::string& src, const std::string& from, const std::string& to) {
    for (size_t at = 0; (at = src.find(from, at)) != std::string::npos; at += to.size())
      src.replace(at, from.size(), to);
  };
  for (const char* t : {"f32", "bf16"})
    for (int64_t batch : {3, 2000}) {  // one block; many blocks on several threads
      SCOPED_TRACE(std::string(t) + " batch " + std::to_string(batch));
      std::string src = text;
      replaceAll(src, "[3,4,5,6]", "[" + std::to_string(batch) + ",4,5,6]");
      replaceAll(src, "f32", t);
      auto g = parseGraph(src);
      ASSERT_TRUE(g) << g.error().message;
      std::mt19937 rng(batch);
      std::uniform_real_distribution<double> dist(-2, 2);
      const TensorMap in = randomInputs(*g, rng, dist);
      auto want = run(*g, in);
      PassContext ctx;
      ASSERT_TRUE(runFuse(*g, ctx));
      ASSERT_EQ(g->numNodes(), 1u) << printGraph(*g);
      expectSameBits(run(*g, in), want);
    }
}

/// "f32[2,3]" for the text IR.
std::string irType(const char* dtype, std::initializer_list<int64_t> dims) {
  std::string s;
  for (int64_t v : dims) s += (s.empty() ? "" : ",") + std::to_string(v);
  return std::string(dtype) + "[" + s + "]";
}

/// `text` (a linear and the op its epilogue takes in) run as written and
/// after `fuse`, which must fold the pair into one node, on the same random
/// inputs: the outputs before (`want`) and after (`got`).
void runUnfusedAndFused(const std::string& text, unsigned seed, std::vector<Tensor>& want, std::vector<Tensor>& got) {
  auto g = parseGraph(text);
  ASSERT_TRUE(g) << g.error().message;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  const TensorMap in = randomInputs(*g, rng, dist);
  want = run(*g, in);
  PassContext ctx;
  auto r = runFuse(*g, ctx);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->statistics.at("epilogues"), 1) << printGraph(*g);
  ASSERT_EQ(g->numNodes(), 1u) << printGraph(*g);
  got = run(*g, in);
}

/// The GEMM epilogue: linear {activation="relu"} (applied in one pass over
/// the GEMM's output) against linear followed by relu.
TEST(FusedKernel, LinearReluEpilogueMatchesLinearThenRelu) {
  for (auto [m, k, p] : {std::array<int64_t, 3>{8, 32, 64}, {3000, 48, 64}, {777, 300, 130}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " k=" + std::to_string(k) + " p=" + std::to_string(p));
    auto dims = [](std::initializer_list<int64_t> d) { return irType("f32", d); };
    const std::string text = "graph g(%x: " + dims({m, k}) + " data, %w: " + dims({p, k}) + " param, %b: " + dims({p}) +
                             " param) {\n  %0 = linear(%x, %w, %b) : " + dims({m, p}) +
                             "\n  %1 = relu(%0) : " + dims({m, p}) + "\n  return %1 \"out\"\n}\n";
    std::vector<Tensor> want, got;
    ASSERT_NO_FATAL_FAILURE(runUnfusedAndFused(text, static_cast<unsigned>(m), want, got));
    ASSERT_EQ(got.size(), 1u);
    // Bit for bit with OpenBLAS here; 1e-6 leaves a BLAS that partitions
    // differently room without hiding a wrong epilogue.
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want[0].numel(); ++i) {
      worst = std::max(worst, std::abs(got[0].at(i) - want[0].at(i)));
      scale = std::max(scale, std::abs(want[0].at(i)));
    }
    EXPECT_LE(worst, 1e-6 * scale);
  }
}

/// The residual epilogue: linear(x, W, b, r) {residual=1} against linear then
/// add, bit for bit: f32 (BLAS), bf16 with a bf16 residual and bf16 with
/// amp's f32 residual (oneDNN's bf16 GEMM where the CPU has one, else the
/// f32 fallback), several shapes.
TEST(FusedKernel, LinearResidualEpilogueMatchesLinearThenAdd) {
  struct Case {
    const char *x, *r;
  };
  for (Case c : {Case{"f32", "f32"}, Case{"bf16", "bf16"}, Case{"bf16", "f32"}})
    for (auto [m, k, p] : {std::array<int64_t, 3>{8, 32, 64}, {3000, 48, 64}, {777, 300, 130}}) {
      SCOPED_TRACE(std::string(c.x) + " + " + c.r + " m=" + std::to_string(m) + " k=" + std::to_string(k) +
                   " p=" + std::to_string(p));
      auto ty = irType;
      const std::string text = "graph g(%x: " + ty(c.x, {m, k}) + " data, %w: " + ty(c.x, {p, k}) + " param, %b: " +
                               ty(c.x, {p}) + " param, %r: " + ty(c.r, {m, p}) + " data) {\n  %0 = linear(%x, %w, %b) : " +
                               ty(c.x, {m, p}) + "\n  %1 = add(%0, %r) : " + ty(c.r, {m, p}) +
                               "\n  return %1 \"out\"\n}\n";
      std::vector<Tensor> want, got;
      ASSERT_NO_FATAL_FAILURE(runUnfusedAndFused(text, static_cast<unsigned>(m + p), want, got));
      expectSameBits(got, want);
    }
}


std::string typeStr(const char* t, const Shape& s) {
  return std::string(t) + shapeStr(s);
}

/// A chain with a bias operand ending in a sum or mean over `dims`, with an
/// intermediate also returned: tanh(x + b) * g -> reduce; tanh also "t".
std::string reductionGraph(const char* t, const Shape& shape, const std::string& op, const std::string& dims,
                           bool keepdim, const Shape& reduced) {
  const std::string ty = typeStr(t, shape);
  std::string s = "graph g(%x: " + ty + " data, %g: " + ty + " data, %b: " + typeStr(t, {shape.back()}) + " data) {\n";
  s += "  %0 = add(%x, %b) : " + ty + "\n";
  s += "  %1 = tanh(%0) : " + ty + "\n";
  s += "  %2 = mul(%1, %g) : " + ty + "\n";
  s += "  %3 = " + op + "(%2) {dims=" + dims + ", keepdim=" + (keepdim ? "1" : "0") + "} : " + typeStr(t, reduced) +
       "\n";
  s += "  return %3 \"r\", %1 \"t\"\n}\n";
  return s;
}

/// fused_reduction against the chain and the one-op sum/mean: every path of
/// reduce_loops.h (long rows pulled in chunks, one row split in blocks,
/// trailing plus strided reduced dims, strided only, all dims, keepdim,
/// empty) must give the same bits, and the returned intermediate too.
TEST(FusedKernel, ReductionEndingAChainMatchesTheOneOpKernelsBitForBit) {
  struct Case {
    Shape shape;
    std::string dims;
    bool keepdim;
    Shape reduced;
  };
  const std::vector<Case> cases = {
      {{4, 70001}, "[1]", false, {4}},      // long rows: chunks of one block
      {{70001}, "[0]", false, {}},          // one row: parallel blocks
      {{3, 5, 700}, "[0, 2]", false, {5}},  // trailing row sums, then strided
      {{6, 1000}, "[0]", true, {1, 1000}},  // strided, two inner blocks
      {{2, 3, 4, 5}, "[1, 3]", true, {2, 1, 4, 1}},
      {{300, 301}, "[]", false, {}},   // every dim
      {{37, 8}, "[-1]", false, {37}},  // short rows, a ragged tail per row
      {{0, 5}, "[0]", false, {5}},     // empty: zeros / NaN means
  };
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> dist(-2, 2);
  for (const Case& c : cases)
    for (const char* t : {"f32", "f64"})
      for (const char* op : {"sum", "mean"}) {
        SCOPED_TRACE(std::string(op) + " " + typeStr(t, c.shape) + " dims=" + c.dims);
        auto g = parseGraph(reductionGraph(t, c.shape, op, c.dims, c.keepdim, c.reduced));
        ASSERT_TRUE(g) << g.error().message;
        const TensorMap in = randomInputs(*g, rng, dist);
        auto want = run(*g, in);
        PassContext ctx;
        auto r = runFuse(*g, ctx);
        ASSERT_TRUE(r) << r.error().message;
        ASSERT_EQ(r->statistics.at("reductions"), 1) << printGraph(*g);
        ASSERT_EQ(g->numNodes(), 1u) << printGraph(*g);
        expectSameBits(run(*g, in), want);
      }
}

/// bf16 bodies fuse for every target (the CPU's fused kernels and the CUDA
/// codegen both run them); a bf16 sum never ends a group (the fused
/// reductions run in f32/f64), while the chain before it fuses.
TEST(FusedKernel, Bf16BodiesOnEveryTargetAndWithoutReductions) {
  const char* text = R"(graph g(%x: bf16[64] data, %y: bf16[64] data) {
  %0 = add(%x, %y) : bf16[64]
  %1 = relu(%0) : bf16[64]
  %2 = sum(%1) {dims=[0], keepdim=0} : bf16[]
  return %2 "s", %1 "r"
})";
  for (bool cpu : {true, false}) {
    SCOPED_TRACE(cpu ? "cpu" : "cuda");
    auto g = parseGraph(text);
    ASSERT_TRUE(g) << g.error().message;
    PassContext ctx;
    ctx.cpu_only_ops = cpu;
    auto r = runFuse(*g, ctx);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->statistics.at("groups"), 1) << printGraph(*g);
    EXPECT_EQ(r->statistics.at("reductions"), 0) << printGraph(*g);
    EXPECT_EQ(g->numNodes(), 2u) << printGraph(*g);  // fused_elementwise, sum
  }
}

TEST(BroadcastRunInner, WhichOperandsOneIndexDivisionReaches) {
  EXPECT_EQ(broadcastRunInner({6}, {3, 4, 5, 6}), 1);
  EXPECT_EQ(broadcastRunInner({5, 6}, {3, 4, 5, 6}), 1);
  EXPECT_EQ(broadcastRunInner({4, 1, 1}, {3, 4, 5, 6}), 30);
  EXPECT_EQ(broadcastRunInner({1, 4, 1, 1}, {3, 4, 5, 6}), 30);
  EXPECT_EQ(broadcastRunInner({}, {3, 4}), 1);
  EXPECT_EQ(broadcastRunInner({3, 4}, {3, 4}), 1);
  EXPECT_EQ(broadcastRunInner({4, 1, 6}, {3, 4, 5, 6}), std::nullopt);  // two runs
  EXPECT_EQ(broadcastRunInner({4}, {3, 4, 5, 6}), std::nullopt);        // not right-aligned
  EXPECT_EQ(broadcastRunInner({3, 1, 4}, {3, 1, 4}), 1);                // size-1 dims of the output are neutral
  EXPECT_EQ(broadcastRunInner({2, 3, 4}, {3, 4}), std::nullopt);
}

}  // namespace
}  // namespace kiln
