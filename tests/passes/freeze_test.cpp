// The freeze pass: --freeze patterns, what the pass removes from a training
// step, and that the parameters left training are updated bit for bit as
// when the frozen ones were never differentiated (the old autodiff skip,
// rebuilt here by hand), which is PyTorch's requires_grad=False.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cpu/cpu_executor.h"
#include "core/text_ir.h"
#include "passes/autodiff.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/freeze.h"
#include "passes/loss.h"
#include "passes/optimizer.h"
#include "passes/training_graph.h"
#include "tests/parse_or_fail.h"

namespace kiln {
namespace {

// A three-layer MLP with an mse loss.
const char* kMlp =
    R"(graph mlp(%input0: f32[4,8] data, %layer1.weight: f32[16,8] param, %layer1.bias: f32[16] param, %layer2.weight: f32[16,16] param, %layer2.bias: f32[16] param, %head.weight: f32[3,16] param, %head.bias: f32[3] param) {
  %0 = linear(%input0, %layer1.weight, %layer1.bias) : f32[4,16] @layer1
  %1 = relu(%0) : f32[4,16] @layer1
  %2 = linear(%1, %layer2.weight, %layer2.bias) : f32[4,16] @layer2
  %3 = tanh(%2) : f32[4,16] @layer2
  %4 = linear(%3, %head.weight, %head.bias) : f32[4,3] @head
  return %4 "output0"
}
)";

using test::parse;

TrainingOptions options(OptimizerKind kind, double clip, std::set<std::string> frozen) {
  TrainingOptions o;
  o.loss = LossKind::Mse;
  o.optimizer.kind = kind;
  o.optimizer.clip_grad_norm = clip;
  if (kind == OptimizerKind::Sgd) o.optimizer.momentum = 0.9;
  o.frozen = std::move(frozen);
  return o;
}

/// The default pipeline with the freeze pass; its trace.
Graph buildNew(const TrainingOptions& o, TrainingGraphKind kind, std::vector<PassTraceEntry>* trace = nullptr) {
  Graph fwd = parse(kMlp);
  PassContext ctx{o};
  auto g = buildTrainingGraph(fwd, ctx, kind, trace);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : Graph();
}

/// The step as built before the freeze pass existed: autodiff differentiated
/// only the parameters not frozen, then optimizer, cse, dce.
Graph buildOld(const TrainingOptions& o) {
  Graph g = parse(kMlp);
  PassContext ctx{o};
  EXPECT_TRUE(runLoss(g, ctx).ok());
  Value* loss = nullptr;
  for (const GraphOutput& out : g.outputs())
    if (out.role == OutputRole::Loss) loss = out.value;
  std::vector<Value*> params;
  for (Value* v : g.inputs())
    if (v->role() == ValueRole::Param && !o.frozen.count(v->name())) params.push_back(v);
  auto grads = differentiate(g, loss, params);
  EXPECT_TRUE(grads.ok()) << grads.error().message;
  for (size_t i = 0; i < params.size(); ++i) g.addOutput((*grads)[i], params[i]->name(), OutputRole::Gradient);
  EXPECT_TRUE(runOptimizer(g, ctx).ok());
  EXPECT_TRUE(runCse(g, ctx).ok());
  EXPECT_TRUE(runDce(g, ctx).ok());
  return g;
}

TensorMap randomInputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0, 1);
  TensorMap m;
  for (const Value* v : g.inputs()) {
    Tensor t(v->type());
    if (v->name() == "step")
      t.set(0, 3);
    else if (v->name() == "lr")
      t.set(0, 0.01);
    else
      for (int64_t i = 0; i < t.numel(); ++i) t.set(i, v->role() == ValueRole::OptState ? std::abs(d(rng)) : d(rng));
    m[v->name()] = t;
  }
  return m;
}

/// Outputs by name and role.
std::map<std::string, Tensor> run(const Graph& g, const TensorMap& all_inputs) {
  TensorMap in;
  for (const Value* v : g.inputs()) in[v->name()] = all_inputs.at(v->name());
  auto ex = CpuExecutor::create(g, {.num_threads = 1});
  EXPECT_TRUE(ex.ok()) << ex.error().message;
  auto out = ex->run(in);
  EXPECT_TRUE(out.ok()) << out.error().message;
  std::map<std::string, Tensor> m;
  for (size_t i = 0; i < g.outputs().size(); ++i)
    m[std::string(outputRoleName(g.outputs()[i].role)) + ":" + g.outputs()[i].name] = (*out)[i];
  return m;
}

bool hasInput(const Graph& g, const std::string& name) {
  return g.findInput(name) != nullptr;
}

bool hasOutput(const Graph& g, const std::string& name, OutputRole role) {
  for (const GraphOutput& o : g.outputs())
    if (o.name == name && o.role == role) return true;
  return false;
}

TEST(FreezePattern, GlobsAndModulePrefixes) {
  EXPECT_TRUE(freezePatternMatches("layer1", "layer1"));
  EXPECT_TRUE(freezePatternMatches("layer1", "layer1.0.conv1.weight"));
  EXPECT_FALSE(freezePatternMatches("layer1", "layer10.weight"));
  EXPECT_FALSE(freezePatternMatches("layer1.0.conv", "layer1.0.conv1.weight"));
  EXPECT_TRUE(freezePatternMatches("layer1.*", "layer1.0.conv1.weight"));
  EXPECT_TRUE(freezePatternMatches("*.bias", "layer1.0.bn1.bias"));
  EXPECT_FALSE(freezePatternMatches("*.bias", "layer1.0.bn1.weight"));
  EXPECT_TRUE(freezePatternMatches("layer[12].weight", "layer2.weight"));
  EXPECT_TRUE(freezePatternMatches("h.?.attn*", "h.0.attn.c_attn.weight"));
}

TEST(FreezePattern, ResolvesAgainstParametersAndAliases) {
  std::vector<std::string> params = {"wte.weight", "h.0.w", "h.1.w", "ln.weight"};
  auto r = resolveFreezePatterns({"h", "ln.weight"}, params);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, (std::set<std::string>{"h.0.w", "h.1.w", "ln.weight"}));
  // A tied parameter is frozen under either of its names.
  r = resolveFreezePatterns({"lm_head"}, params, {{"lm_head.weight", "wte.weight"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, (std::set<std::string>{"wte.weight"}));
  r = resolveFreezePatterns({"h.2"}, params);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  EXPECT_NE(r.error().message.find("--freeze 'h.2' matches no parameter (parameters: wte.weight, h.0.w"),
            std::string::npos)
      << r.error().message;
}

TEST(Freeze, NothingFrozenChangesNothing) {
  std::vector<PassTraceEntry> trace;
  buildNew(options(OptimizerKind::AdamW, 0, {}), TrainingGraphKind::Step, &trace);
  bool seen = false;
  for (const PassTraceEntry& e : trace)
    if (e.pass == "freeze") {
      seen = true;
      EXPECT_FALSE(e.result.changed);
      EXPECT_EQ(e.result.statistics.at("nodes_removed"), 0);
    }
  EXPECT_TRUE(seen) << "freeze is not in the default Step pipeline";
}

TEST(Freeze, RemovesTheFrozenLayersBackwardUpdateAndState) {
  std::vector<PassTraceEntry> trace;
  Graph g =
      buildNew(options(OptimizerKind::AdamW, 0, {"layer1.weight", "layer1.bias"}), TrainingGraphKind::Step, &trace);
  // The first layer's whole backward goes: nothing before it needs a gradient.
  for (const auto& n : g.nodes())
    EXPECT_FALSE(n->scope() == "layer1" && n->provenance().rfind("grad of", 0) == 0) << n->describe();
  for (const char* p : {"layer1.weight", "layer1.bias"}) {
    EXPECT_TRUE(hasInput(g, p));  // the forward reads it
    EXPECT_FALSE(hasOutput(g, p, OutputRole::ParamUpdate)) << p;
    EXPECT_FALSE(hasInput(g, std::string("exp_avg.") + p)) << p;
    EXPECT_FALSE(hasInput(g, std::string("exp_avg_sq.") + p)) << p;
    EXPECT_FALSE(hasOutput(g, std::string("exp_avg.") + p, OutputRole::OptStateUpdate)) << p;
  }
  for (const char* p : {"layer2.weight", "head.bias"}) {
    EXPECT_TRUE(hasOutput(g, p, OutputRole::ParamUpdate)) << p;
    EXPECT_TRUE(hasInput(g, std::string("exp_avg.") + p)) << p;
  }
  const PassTraceEntry* freeze = nullptr;
  const PassTraceEntry* before = nullptr;
  for (size_t i = 0; i < trace.size(); ++i)
    if (trace[i].pass == "freeze") freeze = &trace[i], before = &trace[i - 1];
  ASSERT_TRUE(freeze && before);
  const auto& st = freeze->result.statistics;
  EXPECT_TRUE(freeze->result.changed);
  EXPECT_EQ(st.at("params_frozen"), 2);
  EXPECT_EQ(st.at("opt_state_removed"), 4);
  EXPECT_EQ(st.at("nodes_removed"), static_cast<double>(before->nodes_after - freeze->nodes_after));
  EXPECT_GT(st.at("nodes_removed"), 0);
  EXPECT_DOUBLE_EQ(st.at("flops_removed"), before->flops_after - freeze->flops_after);
  // At least the weight gradient's GEMM (2 * 16 * 4 * 8) and AdamW on 144 elements.
  EXPECT_GE(st.at("flops_removed"), 2.0 * 16 * 4 * 8 + 12.0 * 144);
  EXPECT_LT(freeze->peak_bytes_after, before->peak_bytes_after);  // less optimizer state
}

TEST(Freeze, FrozenHeadKeepsTheInputGradientAndDropsTheWeightGradient) {
  Graph g = buildNew(options(OptimizerKind::AdamW, 0, {"head.weight", "head.bias"}), TrainingGraphKind::Gradients);
  EXPECT_FALSE(hasOutput(g, "head.weight", OutputRole::Gradient));
  EXPECT_FALSE(hasOutput(g, "head.bias", OutputRole::Gradient));
  EXPECT_TRUE(hasOutput(g, "layer1.weight", OutputRole::Gradient));
  // Backward nodes of the head remain (the gradient flows through it to
  // layer2), but none reads the head's input activation %3 (that is dW's).
  int head_backward = 0;
  for (const auto& n : g.nodes())
    if (n->scope() == "head" && n->provenance().rfind("grad of", 0) == 0) {
      ++head_backward;
      for (Value* v : n->inputs())
        EXPECT_FALSE(v->producer() && v->producer()->op() == "tanh") << n->describe() << " computes dW";
    }
  EXPECT_GT(head_backward, 0);
}

// The remaining parameters' updates (and the optimizer state, the loss and
// the clipping norm) are bit for bit those of a step whose autodiff never
// differentiated the frozen parameters.
void expectSameAsOldSkip(OptimizerKind kind, double clip, std::set<std::string> frozen) {
  TrainingOptions o = options(kind, clip, std::move(frozen));
  Graph now = buildNew(o, TrainingGraphKind::Step);
  Graph old = buildOld(o);
  std::vector<std::string> in_now, in_old;
  for (const Value* v : now.inputs()) in_now.push_back(v->name());
  for (const Value* v : old.inputs()) in_old.push_back(v->name());
  EXPECT_EQ(in_now, in_old) << "the graph inputs (optimizer state) differ";
  TensorMap inputs = randomInputs(old, 42);
  auto a = run(now, inputs), b = run(old, inputs);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : b) {
    ASSERT_TRUE(a.count(name)) << name;
    ASSERT_EQ(a.at(name).type(), t.type()) << name;
    EXPECT_EQ(std::memcmp(a.at(name).raw(), t.raw(), t.bytes()), 0) << name << " differs";
  }
}

TEST(Freeze, AdamWUpdatesBitIdenticalToNeverDifferentiating) {
  expectSameAsOldSkip(OptimizerKind::AdamW, 0, {"layer1.weight", "layer1.bias"});
  expectSameAsOldSkip(OptimizerKind::AdamW, 0, {"head.weight", "layer2.bias"});
}

TEST(Freeze, SgdWithClippingBitIdenticalToNeverDifferentiating) {
  // Clipping: the global norm must count only the gradients still trained.
  expectSameAsOldSkip(OptimizerKind::Sgd, 0.5, {"layer2.weight", "layer2.bias"});
  expectSameAsOldSkip(OptimizerKind::Sgd, 0.5, {"layer1.weight"});
}

TEST(Freeze, EverythingFrozenIsNothingToTrain) {
  Graph fwd = parse(kMlp);
  PassContext ctx{
      options(OptimizerKind::AdamW, 0,
              {"layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias", "head.weight", "head.bias"})};
  auto g = buildTrainingGraph(fwd, ctx, TrainingGraphKind::Step);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("nothing to train"), std::string::npos) << g.error().message;
}

TEST(Freeze, UnknownParameterAndWrongPlaceAreErrors) {
  Graph g = parse(kMlp);
  PassContext ctx{options(OptimizerKind::AdamW, 0, {"nope"})};
  auto r = runFreeze(g, ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no parameter 'nope'"), std::string::npos) << r.error().message;
  ctx.training.frozen = {"head.weight"};
  r = runFreeze(g, ctx);  // a forward graph: nothing to freeze yet
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("run it after autodiff"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace kiln
