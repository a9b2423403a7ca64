// The schedule and split_updates passes: on random graphs the new order is
// valid and never raises the estimated peak; on a training step each
// per-parameter update runs right after the last reader of its parameter and
// the planned arena shrinks. (Numerical equality of the scheduled step with
// PyTorch: the train.f32.* tests' equiv mode and the Zoo tests, which run the default pipeline.)
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <unordered_map>

#include "core/graph_cost.h"
#include "core/liveness.h"
#include "core/text_ir.h"
#include "core/verifier.h"
#include "passes/memory_plan.h"
#include "passes/schedule.h"
#include "passes/split_updates.h"
#include "passes/training_graph.h"
#include "tests/parse_or_fail.h"
#include "tests/passes/random_graph.h"

namespace kiln {
namespace {

TEST(Schedule, RandomGraphsStayValidAndNeverPeakHigher) {
  std::mt19937 rng(11);
  int reordered = 0;
  for (int trial = 0; trial < 80; ++trial) {
    Graph g = test::randomGraph(rng);
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::unordered_map<const Value*, const Node*> producer_before;
    for (const auto& n : g.nodes())
      for (const Value* o : n->outputs()) producer_before[o] = n.get();
    const uint64_t before = estimatePeakBytes(g);
    PassContext ctx;
    auto r = runSchedule(g, ctx);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_TRUE(verify(g).ok()) << verify(g).error().message;
    const uint64_t after = estimatePeakBytes(g);
    EXPECT_LE(after, before);
    EXPECT_EQ(r->statistics.at("peak_before"), static_cast<double>(before));
    EXPECT_EQ(r->statistics.at("peak_after"), static_cast<double>(after));
    EXPECT_EQ(r->changed, after < before);
    reordered += r->changed;
    for (const auto& n : g.nodes())  // same nodes computing the same values
      for (const Value* o : n->outputs()) EXPECT_EQ(producer_before.at(o), n.get());
  }
  EXPECT_GT(reordered, 10) << "the scheduler should find lower peaks on many random graphs";
}

// The MLP's AdamW step through the whole default pipeline.
Graph mlpStep(const std::vector<std::string>& passes) {
  Graph fwd = test::parse(R"(graph mlp(%input0: f32[64,32] data, %w1: f32[128,32] param, %b1: f32[128] param, %w2: f32[10,128] param, %b2: f32[10] param) {
  %0 = linear(%input0, %w1, %b1) : f32[64,128] @fc1
  %1 = relu(%0) : f32[64,128] @act
  %2 = linear(%1, %w2, %b2) : f32[64,10] @fc2
  return %2 "output0"
})");
  PassContext ctx;
  ctx.training.loss = LossKind::CrossEntropy;
  ctx.training.target = TensorType{DType::I64, {64}};
  std::vector<const PassInfo*> pipeline;
  if (!passes.empty()) {
    auto resolved = resolvePipeline(passes, "the test pipeline");
    EXPECT_TRUE(resolved.ok()) << resolved.error().message;
    if (resolved.ok()) pipeline = *resolved;
  }
  auto g = buildTrainingGraph(fwd, ctx, TrainingGraphKind::Step, nullptr, {.verify_each = true}, pipeline);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : Graph();
}

TEST(Schedule, UpdatesRunAsSoonAsTheirParameterIsFree) {
  Graph g = mlpStep({});
  std::unordered_map<const Node*, size_t> pos;
  for (const auto& n : g.nodes()) pos[n.get()] = pos.size();
  std::vector<size_t> update_pos;
  size_t last_gradient = 0;
  for (const auto& n : g.nodes()) {
    if (n->op() != "adam_update") continue;
    update_pos.push_back(pos.at(n.get()));
    last_gradient = std::max(last_gradient, pos.at(n->input(4)->producer()));
    const Value* param = n->input(3);
    for (const Use& u : param->uses())
      if (u.user != n.get())
        EXPECT_LT(pos.at(u.user), pos.at(n.get())) << "the update of " << param->name() << " overwrites it in place";
  }
  ASSERT_EQ(update_pos.size(), 4u);
  // Without scheduling all four would wait for the last gradient (w1's).
  // b2's update runs right after its gradient; w2's and b1's wait behind
  // the backward nodes that free more than they do (the fused ReLU backward
  // frees two [64, 128] buffers, w1's gemm one), which the list scheduler
  // runs first.
  EXPECT_GE(std::count_if(update_pos.begin(), update_pos.end(), [&](size_t p) { return p < last_gradient; }), 1);
  EXPECT_EQ(inPlaceCandidates(g, analyzeLiveness(g)).size(), 13u);
}

TEST(Schedule, LowersTheTrainingStepsPlannedArena) {
  Graph unscheduled = mlpStep({"loss", "autodiff", "optimizer", "simplify", "fuse"});
  Graph scheduled = mlpStep({"loss", "autodiff", "optimizer", "simplify", "fuse", "split_updates", "schedule"});
  auto plan = [](const Graph& g) {
    const InPlaceUpdates in_place = inPlaceCandidates(g, analyzeLiveness(g));
    return planMemory(g, {}, &in_place);
  };
  const MemoryPlan before = plan(unscheduled), after = plan(scheduled);
  EXPECT_LT(after.arena_bytes, before.arena_bytes);
  EXPECT_LT(after.peak_bytes, before.peak_bytes);
  EXPECT_EQ(after.input_bytes, before.input_bytes);
}

TEST(SplitUpdates, KeepsOneNodeWhenClippingNeedsEveryGradient) {
  Graph g = test::parse(R"(graph clipped(%g1: f32[4] data, %g2: f32[4] data, %w1: f32[4] param, %w2: f32[4] param, %lr: f64[] scalar, %step: f64[] opt_state) {
  %0 = global_norm(%g1, %g2) : f32[] @optimizer
  %1 = clamp(%0) {max=1.0} : f32[] @optimizer
  %2, %3 = sgd_update(%lr, %step, %1, %w1, %g1, %w2, %g2) : f32[4], f32[4] @optimizer
  return %2 "w1" param_update, %3 "w2" param_update
})");
  PassContext ctx;
  auto r = runSplitUpdates(g, ctx);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->changed);
  EXPECT_EQ(r->statistics.at("kept_multi_tensor"), 1.0);
  EXPECT_EQ(g.numNodes(), 3u);
}

}  // namespace
}  // namespace kiln
