// remat on a whole training step (passes/remat.h): under a budget between
// the graph inputs and the unbudgeted peak, the step fits it, runs from the
// executor's arena with a smaller plan, and computes every output bit for
// bit as the step without remat; an impossible budget is a clear error.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_executor.h"
#include "core/graph_cost.h"
#include "core/text_ir.h"
#include "passes/training_graph.h"
#include "tests/backend/random_inputs.h"

namespace kiln {
namespace {

constexpr int64_t kBatch = 512;

Result<Graph> deepStep(uint64_t budget) {
  const std::string b = std::to_string(kBatch);
  auto fwd =
      parseGraph("graph deep(%input0: f32[" + b +
                     ",64] data, %w1: f32[256,64] param, %b1: f32[256] param, "
                     "%w2: f32[256,256] param, %b2: f32[256] param, %w3: f32[10,256] param, %b3: f32[10] param) {\n"
                     "  %0 = linear(%input0, %w1, %b1) : f32[" +
                     b +
                     ",256] @fc1\n"
                     "  %1 = gelu(%0) {approximate=\"none\"} : f32[" +
                     b +
                     ",256] @act1\n"
                     "  %2 = linear(%1, %w2, %b2) : f32[" +
                     b +
                     ",256] @fc2\n"
                     "  %3 = tanh(%2) : f32[" +
                     b +
                     ",256] @act2\n"
                     "  %4 = linear(%3, %w3, %b3) : f32[" +
                     b +
                     ",10] @fc3\n"
                     "  return %4 \"output0\"\n}\n",
                 "deep");
  if (!fwd) return fwd.error();
  PassContext ctx;
  ctx.training.loss = LossKind::CrossEntropy;
  ctx.training.target = TensorType{DType::I64, {kBatch}};
  ctx.training.memory_budget = budget;
  return buildTrainingGraph(*fwd, ctx, TrainingGraphKind::Step);
}

TEST(RematStep, FitsTheBudgetWithTheSameResults) {
  auto plain = deepStep(0);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  uint64_t inputs = 0;
  for (const Value* v : plain->inputs()) inputs += v->type().bytes();
  const uint64_t peak = estimatePeakBytes(*plain);
  const uint64_t budget = inputs + (peak - inputs) * 3 / 4;
  auto remat = deepStep(budget);
  ASSERT_TRUE(remat.ok()) << remat.error().message;
  EXPECT_LE(estimatePeakBytes(*remat), budget);
  EXPECT_GT(remat->numNodes(), plain->numNodes()) << "something is recomputed";

  auto ex_plain = CpuExecutor::create(*plain);
  auto ex_remat = CpuExecutor::create(*remat);
  ASSERT_TRUE(ex_plain.ok() && ex_remat.ok());
  EXPECT_LT(ex_remat->memoryPlan().peak_bytes, ex_plain->memoryPlan().peak_bytes);
  const TensorMap in = test::randomInputs(*plain, 3);
  auto a = ex_plain->run(in);
  auto b = ex_remat->run(in);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t k = 0; k < a->size(); ++k) {
    ASSERT_EQ((*a)[k].bytes(), (*b)[k].bytes());
    EXPECT_EQ(std::memcmp((*a)[k].raw(), (*b)[k].raw(), (*a)[k].bytes()), 0) << plain->outputs()[k].name;
  }
}

TEST(RematStep, AnImpossibleBudgetSaysTheSmallestPeak) {
  auto g = deepStep(1000);
  ASSERT_FALSE(g.ok());
  const std::string& m = g.error().message;
  EXPECT_NE(m.find("remat"), std::string::npos) << m;
  EXPECT_NE(m.find("budget of 1000 B cannot be met: the smallest peak remat reached is"), std::string::npos) << m;
  EXPECT_NE(m.find("weights, optimizer state and batch alone take"), std::string::npos) << m;
  EXPECT_NE(m.find(" there reads and writes "), std::string::npos) << "names the node that sets the floor: " << m;
}

}  // namespace
}  // namespace kiln
