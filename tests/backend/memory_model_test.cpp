// One memory model per device (core/memory_rules.h): the CPU's rules are
// read off its kernels, the passes count with them, and the executor runs
// the memory_plan pass's own plan when it runs nodes one at a time, so the
// peak after the last pass, the graph's estimate and the executed plan are
// one number.
#include <gtest/gtest.h>

#include "backend/kernel.h"
#include "backend/training_session.h"
#include "core/graph_cost.h"
#include "core/text_ir.h"
#include "passes/memory_plan.h"
#include "passes/pass_manager.h"
#include "passes/pass_registry.h"
#include "tests/backend/random_inputs.h"

namespace kiln {
namespace {

Graph parse(const char* text) {
  auto g = parseGraph(text, "test");
  EXPECT_TRUE(g.ok()) << g.error().message;
  return std::move(*g);
}

const Node& nodeAt(const Graph& g, size_t k) {
  auto it = g.nodes().begin();
  std::advance(it, k);
  return **it;
}

const char* kViews = R"(graph views(%x: f32[64,64] data) {
  %r = reshape(%x) {shape=[4096]} : f32[4096]
  %p = permute(%x) {dims=[1,0]} : f32[64,64]
  %e = matmul(%p, %x) : f32[64,64]
  %s = sum(%e) : f32[]
  %t = sum(%r) : f32[]
  %u = add(%s, %t) : f32[]
  return %u "output0"
})";

TEST(MemoryModel, CpuRulesAreWhatItsKernelsDo) {
  Graph g = parse(kViews);
  const MemoryRules cpu = cpuMemoryRules(), pytorch;
  EXPECT_EQ(cpu.target, "cpu");
  EXPECT_TRUE(cpu.view(nodeAt(g, 0))) << "cpu.reshape returns a view";
  EXPECT_FALSE(cpu.view(nodeAt(g, 1))) << "cpu.permute copies";
  EXPECT_TRUE(pytorch.view(nodeAt(g, 1))) << "PyTorch's permute is a view";
  EXPECT_FALSE(cpu.writes_over_input(nodeAt(g, 2))) << "a matmul writes a buffer of its own";
  EXPECT_TRUE(cpu.writes_over_input(nodeAt(g, 5))) << "cpu.add may write over a dying input";
  // Restricting the dialects names them in the target (plans of other
  // selections are not reused).
  EXPECT_EQ(cpuMemoryRules(DialectOrder{{"cpu"}}).target, "cpu[cpu]");
}

// The plan assumes one answer per op: every kernel of an op must agree on
// whether its output is a view (the executor checks the one it binds).
TEST(MemoryModel, KernelsOfAnOpAgreeOnViews) {
  const KernelRegistry& reg = KernelRegistry::cpu();
  for (const std::string& op : reg.ops()) {
    const auto ks = reg.candidates(op);
    for (const KernelDef* k : ks)
      EXPECT_EQ(k->output_views_input0, ks.front()->output_views_input0) << op << ": " << k->name;
  }
}

TEST(MemoryModel, EstimateCountsTheCopiesTheCpuMakes) {
  Graph g = parse(kViews);
  const uint64_t cpu = estimatePeakBytes(g, cpuMemoryRules()), pytorch = estimatePeakBytes(g);
  EXPECT_EQ(cpu, 3u * 64 * 64 * 4) << "x, the CPU's permuted copy of it and the product, while the matmul runs";
  EXPECT_LT(pytorch, cpu) << "PyTorch's permute is a view of x";
  EXPECT_EQ(planMemory(g, cpuMemoryRules()).peak_bytes, cpu);
}

const char* kBranches = R"(graph branches(%input0: f32[8,16] data, %a: f32[16] param, %b: f32[16] param,
                                     %c: f32[16] param) {
  %0 = mul(%input0, %a) : f32[8,16]
  %1 = mul(%input0, %b) : f32[8,16]
  %2 = mul(%input0, %c) : f32[8,16]
  %3 = tanh(%0) : f32[8,16]
  %4 = exp(%1) : f32[8,16]
  %5 = sigmoid(%2) : f32[8,16]
  %6 = add(%3, %4) : f32[8,16]
  %7 = add(%6, %5) : f32[8,16]
  %8 = mean(%7) : f32[]
  return %8 "output0"
})";

TrainingConfig sgdConfig(bool side_by_side) {
  TrainingConfig c;
  c.passes.training.loss = LossKind::Model;
  c.passes.training.optimizer.kind = OptimizerKind::Sgd;
  c.lr = 0.1;
  c.num_threads = 2;
  c.concurrent_nodes = side_by_side;
  c.min_beside_micros = 0;  // every independent run of nodes side by side
  return c;
}

TEST(MemoryModel, TheExecutorRunsThePassesPlan) {
  Model m = test::modelFromText(kBranches, "branches", 3, 1.0);
  auto s = TrainingSession::create(m, sgdConfig(false));
  ASSERT_TRUE(s.ok()) << s.error().message;
  const MemoryPlan& plan = (*s)->memoryPlan();
  EXPECT_EQ(plan.made_by, "memory_plan pass");
  EXPECT_EQ(plan.target, "cpu");
  EXPECT_FALSE(plan.widened_to_stages);
  ASSERT_TRUE(checkPlan(plan).ok());
  const auto& trace = (*s)->passTrace();
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace.back().pass, "memory_plan");
  EXPECT_EQ(trace.back().peak_bytes_after, plan.peak_bytes) << "the pass's peak is the executed plan's";
  EXPECT_EQ(estimatePeakBytes((*s)->graph(), cpuMemoryRules()), plan.peak_bytes);
  const TensorMap inputs = test::randomInputs((*s)->graph(), 1);
  EXPECT_TRUE((*s)->step({{"input0", inputs.at("input0")}}).ok());
}

// Nodes that run together share no bytes: the executor plans again under
// the same rules with lifetimes widened to its stages.
TEST(MemoryModel, SideBySideStagesWidenThePlan) {
  Model m = test::modelFromText(kBranches, "branches", 3, 1.0);
  auto serial = TrainingSession::create(m, sgdConfig(false));
  auto beside = TrainingSession::create(m, sgdConfig(true));
  ASSERT_TRUE(serial.ok() && beside.ok());
  const MemoryPlan& plan = (*beside)->memoryPlan();
  ASSERT_TRUE(plan.widened_to_stages) << "the three branches should run side by side";
  EXPECT_EQ(plan.made_by, "executor");
  EXPECT_EQ(plan.target, "cpu");
  ASSERT_TRUE(checkPlan(plan).ok());
  EXPECT_GE(plan.peak_bytes, (*serial)->memoryPlan().peak_bytes);
}

// A plan points at the graph's values: a pass that changes the graph after
// memory_plan drops it, and the executor plans for itself.
TEST(MemoryModel, APassAfterThePlanDropsIt) {
  Graph g = parse(R"(graph dead(%x: f32[4] data) {
  %a = exp(%x) : f32[4]
  %b = neg(%x) : f32[4]
  return %a "output0"
})");
  PassContext ctx;
  ctx.memory = cpuMemoryRules();
  ASSERT_TRUE(runPipeline(g, ctx, {findPass("memory_plan")}).ok());
  ASSERT_TRUE(ctx.memory_plan);
  EXPECT_EQ(ctx.memory_plan->made_by, "memory_plan pass");
  ASSERT_TRUE(runPipeline(g, ctx, {findPass("dce")}).ok());
  EXPECT_FALSE(ctx.memory_plan) << "dce removed %b: the plan no longer describes the graph";
  // A plan of another graph is not reused either.
  ASSERT_TRUE(runPipeline(g, ctx, {findPass("memory_plan")}).ok());
  Graph other = parse(kViews);
  EXPECT_FALSE(reusablePlan(ctx.memory_plan, other, ctx.memory, {}));
  NodeStages one = {{0, 1}};
  EXPECT_TRUE(reusablePlan(ctx.memory_plan, g, ctx.memory, one));
  EXPECT_FALSE(reusablePlan(ctx.memory_plan, g, MemoryRules{}, one)) << "made under the cpu's rules";
}

}  // namespace
}  // namespace kiln
