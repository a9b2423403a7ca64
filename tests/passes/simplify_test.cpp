// The simplify pass and its parts: every algebraic rule is documented, fold
// gives bit for bit what the CPU kernels compute for the unfolded node, and
// training graphs built with simplify compute what they compute with plain
// cse + dce. The rewrites themselves are checked in
// tests/passes/filecheck/{fold,simplify}.kir.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <set>

#include "backend/cpu/cpu_executor.h"
#include "core/op_table.h"
#include "core/text_ir.h"
#include "passes/algebraic_rules.h"
#include "passes/fold.h"
#include "passes/pass_manager.h"
#include "passes/simplify.h"
#include "passes/training_graph.h"
#include "tests/parse_or_fail.h"

namespace kiln {
namespace {

using test::parse;

TensorMap randomInputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  TensorMap m;
  for (const Value* v : g.inputs()) {
    Tensor t(v->type());
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
    m[v->name()] = t;
  }
  return m;
}

std::vector<Tensor> run(const Graph& g, const TensorMap& inputs) {
  auto ex = CpuExecutor::create(g, {.seed = 7, .num_threads = 1});
  EXPECT_TRUE(ex.ok()) << ex.error().message;
  if (!ex.ok()) return {};
  auto out = ex->run(inputs);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? std::move(*out) : std::vector<Tensor>{};
}

/// The outputs, or nothing when the executor refuses the graph.
std::optional<std::vector<Tensor>> tryRun(const Graph& g) {
  auto ex = CpuExecutor::create(g, {.seed = 7, .num_threads = 1});
  if (!ex.ok()) return std::nullopt;
  auto out = ex->run({});
  if (!out.ok()) return std::nullopt;
  return std::move(*out);
}

bool sameBytes(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

TEST(AlgebraicRules, EveryRuleHasANameAReasonAndAKnownOp) {
  std::set<std::string> names;
  for (const AlgebraicRule& r : algebraicRules()) {
    ASSERT_NE(r.name, nullptr);
    std::string name = r.name;
    EXPECT_FALSE(name.empty());
    for (char c : name) EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) || c == '_') << name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate rule name " << name;
    ASSERT_NE(r.why, nullptr) << name;
    EXPECT_GT(std::strlen(r.why), 20u) << name << ": say why the rewrite is valid";
    ASSERT_NE(r.op, nullptr) << name;
    EXPECT_TRUE(std::string(r.op) == "*" || OpTable::get().find(r.op)) << name << ": unknown op " << r.op;
    EXPECT_NE(r.rewrite, nullptr) << name;
  }
  EXPECT_GE(names.size(), 15u);
}

// fold against the kernels: every op fold knows, over dtypes and awkward
// values (-0.0, values that round in f32 and f16, huge and tiny ones), run
// once unfolded on the CPU executor and once folded; the bytes must agree.
TEST(Fold, BitIdenticalToTheCpuKernels) {
  const std::vector<double> values = {0.0,   -0.0, 1.0,   -1.0,    3.0,        0.1,   -2.7,   1.0 / 3.0,
                                      1e-8,  6.0,  65504, 1e30,    -1e-30,     2.5,   0.5001, 100.0,
                                      1e300, 7.0,  1e-40, 1.00001, 16777217.0, -255.5};
  const std::vector<std::string> dtypes = {"f32", "f64", "f16", "bf16", "i64", "i32", "i8", "u8", "bool"};
  const std::vector<std::string> unary = {"neg", "abs", "relu", "sqrt"};
  const std::vector<std::string> binary = {"add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt", "ge"};
  size_t checked = 0, folded = 0;
  auto check = [&](const std::string& text) {
    Graph g = parse(text);
    if (g.numNodes() == 0) return;
    std::optional<std::vector<Tensor>> want = tryRun(g);
    if (!want) return;  // the kernel refused the op on this dtype: nothing to compare
    PassContext ctx;
    auto r = runFold(g, ctx);
    ASSERT_TRUE(r.ok()) << r.error().message;
    folded += r->changed;
    std::vector<Tensor> got = run(g, {});
    ASSERT_EQ(got.size(), want->size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(sameBytes(got[i], (*want)[i]))
          << text << "folded:\n"
          << printGraph(g) << "kernel gives " << (*want)[i].at(0) << ", fold " << got[i].at(0);
    ++checked;
  };
  auto full = [](const std::string& dt, double v, const std::string& name) {
    return "  %" + name + " = full() {dtype=" + dt + ", shape=[], value=" + formatDouble(v) + "} : " + dt + "[]\n";
  };
  for (const std::string& dt : dtypes)
    for (double a : values) {
      const bool floating = dt[0] == 'f' || dt == "bf16";
      for (const std::string& op : unary) {
        if (op == "sqrt" && !floating) continue;
        check("graph u() {\n" + full(dt, a, "0") + "  %2 = " + op + "(%0) : " + dt + "[]\n  return %2 \"o\"\n}\n");
      }
      for (const std::string& to : dtypes)
        check("graph c() {\n" + full(dt, a, "0") + "  %2 = cast(%0) {dtype=" + to + "} : " + to +
              "[]\n  return %2 \"o\"\n}\n");
      for (double b : values)
        for (const std::string& op : binary) {
          if (dt == "bool" && op != "eq" && op != "lt" && op != "ge") continue;
          if ((op == "div") && !floating) continue;  // int / int is f32: covered by the f32 rows
          std::string out = op == "eq" || op == "lt" || op == "ge" ? "bool" : dt;
          check("graph b() {\n" + full(dt, a, "0") + full(dt, b, "1") + "  %2 = " + op + "(%0, %1) : " + out +
                "[]\n  return %2 \"o\"\n}\n");
        }
    }
  EXPECT_GT(checked, 5000u);
  EXPECT_GT(folded, checked / 2) << "fold should fold most of these";
}

// Forward graphs whose training graphs give the rules something to do:
// attention-style head splits (permute chains, reshape chains), a permute of
// size-1 dims, and mean (its folded gradient).
std::string attention(const std::string& dt) {
  std::string t = dt;
  return "graph attn(%x: " + t + "[2,4,6] data, %wq: " + t + "[6,6] param, %wk: " + t + "[6,6] param, %wo: " + t +
         "[6,1] param) {\n"
         "  %0 = matmul(%x, %wq) : " +
         t +
         "[2,4,6]\n"
         "  %1 = reshape(%0) {shape=[2,4,2,3]} : " +
         t +
         "[2,4,2,3]\n"
         "  %2 = permute(%1) {dims=[0,2,1,3]} : " +
         t +
         "[2,2,4,3]\n"
         "  %3 = matmul(%x, %wk) : " +
         t +
         "[2,4,6]\n"
         "  %4 = reshape(%3) {shape=[2,4,2,3]} : " +
         t +
         "[2,4,2,3]\n"
         "  %5 = permute(%4) {dims=[0,2,1,3]} : " +
         t +
         "[2,2,4,3]\n"
         "  %6 = permute(%5) {dims=[0,1,3,2]} : " +
         t +
         "[2,2,3,4]\n"
         "  %7 = matmul(%2, %6) : " +
         t +
         "[2,2,4,4]\n"
         "  %8 = full() {dtype=" +
         t + ", shape=[], value=0.5773502691896258} : " + t +
         "[]\n"
         "  %9 = mul(%7, %8) : " +
         t +
         "[2,2,4,4]\n"
         "  %10 = softmax(%9) {dim=-1} : " +
         t +
         "[2,2,4,4]\n"
         "  %11 = matmul(%10, %2) : " +
         t +
         "[2,2,4,3]\n"
         "  %12 = permute(%11) {dims=[0,2,1,3]} : " +
         t +
         "[2,4,2,3]\n"
         "  %13 = reshape(%12) {shape=[8,6]} : " +
         t +
         "[8,6]\n"
         "  %14 = matmul(%13, %wo) : " +
         t +
         "[8,1]\n"
         "  %15 = reshape(%14) {shape=[2,4,1,1]} : " +
         t +
         "[2,4,1,1]\n"
         "  %16 = permute(%15) {dims=[0,2,3,1]} : " +
         t +
         "[2,1,1,4]\n"
         "  %17 = tanh(%16) : " +
         t +
         "[2,1,1,4]\n"
         "  %18 = mean(%17) : " +
         t +
         "[]\n"
         "  return %18 \"output0\"\n}\n";
}

std::string mlp(const std::string& t) {
  return "graph mlp(%x: " + t + "[3,5] data, %w: " + t + "[4,5] param, %b: " + t +
         "[4] param) {\n"
         "  %0 = linear(%x, %w, %b) : " +
         t +
         "[3,4]\n"
         "  %1 = relu(%0) : " +
         t +
         "[3,4]\n"
         "  %2 = mul(%1, %1) : " +
         t +
         "[3,4]\n"
         "  %3 = mean(%2) : " +
         t +
         "[]\n"
         "  return %3 \"output0\"\n}\n";
}

Graph trainingGraph(const Graph& forward, const std::vector<std::string>& passes, OptimizerKind opt) {
  PassContext ctx;
  ctx.training.loss = LossKind::Model;
  ctx.training.optimizer.kind = opt;
  ctx.training.optimizer.momentum = 0.9;
  auto pipeline = resolvePipeline(passes);
  EXPECT_TRUE(pipeline.ok()) << pipeline.error().message;
  auto g = buildTrainingGraph(forward, ctx, TrainingGraphKind::Step, nullptr, {.verify_each = true}, *pipeline);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : Graph();
}

// Same step with simplify as with cse + dce: the same outputs, bit for bit
// (none of the -0.0 rules applies to these graphs), and fewer nodes.
TEST(Simplify, TrainingStepComputesTheSameValues) {
  for (const std::string dt : {"f32", "f64"})
    for (const std::string& text : {attention(dt), mlp(dt)})
      for (OptimizerKind opt : {OptimizerKind::AdamW, OptimizerKind::Sgd, OptimizerKind::Muon}) {
        Graph fwd = parse(text);
        Graph plain = trainingGraph(fwd, {"loss", "autodiff", "optimizer", "cse", "dce"}, opt);
        Graph simple = trainingGraph(fwd, {"loss", "autodiff", "optimizer", "simplify"}, opt);
        ASSERT_GT(plain.numNodes(), 0u);
        EXPECT_LE(simple.numNodes(), plain.numNodes());
        TensorMap in = randomInputs(plain, 11);
        std::vector<Tensor> a = run(plain, in), b = run(simple, in);
        ASSERT_EQ(a.size(), b.size());
        ASSERT_EQ(plain.outputs().size(), simple.outputs().size());
        for (size_t i = 0; i < a.size(); ++i)
          EXPECT_TRUE(sameBytes(a[i], b[i])) << fwd.name << " " << dt << " output " << plain.outputs()[i].name;
      }
}

TEST(Simplify, ReportsRuleHitsAndRemovedNodes) {
  Graph fwd = parse(attention("f32"));
  Graph g = trainingGraph(fwd, {"loss", "autodiff", "optimizer"}, OptimizerKind::AdamW);
  const size_t before = g.numNodes();
  PassContext ctx;
  auto r = runSimplify(g, ctx);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->changed);
  auto& s = r->statistics;
  EXPECT_GT(s["rule.permute_of_permute"], 0);
  EXPECT_GT(s["rule.permute_as_reshape"], 0);
  EXPECT_GT(s["rule.reshape_of_reshape"], 0);
  EXPECT_GT(s["folded"], 0);
  EXPECT_EQ(s["nodes_removed"], static_cast<double>(before - g.numNodes()));
  // A second run finds nothing left to do.
  auto again = runSimplify(g, ctx);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed) << printGraph(g);
}

// x + 0 with x = -0.0 is +0.0: add_zero keeps equal values, not the bits,
// which its comment says; mul_by_one keeps the bits.
TEST(Simplify, NegativeZero) {
  Graph g = parse(R"(graph z(%x: f32[2] data) {
  %0 = full() {dtype=f32, shape=[], value=0.0} : f32[]
  %1 = add(%x, %0) : f32[2]
  %2 = full() {dtype=f32, shape=[], value=1.0} : f32[]
  %3 = mul(%x, %2) : f32[2]
  return %1 "add", %3 "mul"
}
)");
  TensorMap in = {{"x", Tensor::fromFloats({2}, {-0.0f, 1.5f})}};
  std::vector<Tensor> before = run(g, in);
  PassContext ctx;
  ASSERT_TRUE(runSimplify(g, ctx).ok());
  EXPECT_EQ(g.numNodes(), 0u);
  std::vector<Tensor> after = run(g, in);
  EXPECT_FALSE(std::signbit(before[0].at(0)));
  EXPECT_TRUE(std::signbit(after[0].at(0)));
  EXPECT_EQ(before[0].at(0), after[0].at(0));  // -0.0 == +0.0
  EXPECT_TRUE(sameBytes(before[1], after[1]));
}

}  // namespace
}  // namespace kiln
