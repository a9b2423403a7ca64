// The CPU executor runs a step's intermediates from the planned arena
// (passes/memory_plan.h) and writes donated optimizer updates into their
// inputs: in the steady state the only tensor buffers a run allocates are
// the ones it returns that are not updates (the loss, the step counter),
// counted with the buffer allocator's counter; runs through one arena are
// bit-identical.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "backend/cpu/cpu_executor.h"
#include "core/buffer_pool.h"
#include "core/text_ir.h"
#include "passes/training_graph.h"
#include "tests/backend/random_inputs.h"

namespace kiln {
namespace {

Graph mlpStep(int64_t batch) {
  const std::string b = std::to_string(batch);
  const std::string text = "graph mlp(%input0: f32[" + b +
                           ",32] data, %w1: f32[128,32] param, %b1: f32[128] param, %w2: f32[10,128] param, "
                           "%b2: f32[10] param) {\n"
                           "  %0 = linear(%input0, %w1, %b1) : f32[" +
                           b +
                           ",128] @fc1\n"
                           "  %1 = gelu(%0) {approximate=\"none\"} : f32[" +
                           b +
                           ",128] @act\n"
                           "  %2 = reshape(%1) {shape=[" +
                           b + ",2,64]} : f32[" + b +
                           ",2,64] @view\n"
                           "  %3 = tanh(%2) : f32[" +
                           b +
                           ",2,64] @view\n"
                           "  %4 = reshape(%3) {shape=[" +
                           b + ",128]} : f32[" + b +
                           ",128] @view\n"
                           "  %5 = linear(%4, %w2, %b2) : f32[" +
                           b +
                           ",10] @fc2\n"
                           "  return %5 \"output0\"\n}\n";
  auto fwd = parseGraph(text, "mlp");
  EXPECT_TRUE(fwd.ok()) << fwd.error().message;
  PassContext ctx;
  ctx.training.loss = LossKind::CrossEntropy;
  ctx.training.target = TensorType{DType::I64, {batch}};
  auto g = buildTrainingGraph(*fwd, ctx, TrainingGraphKind::Step);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return std::move(*g);
}

TensorMap inputsFor(const Graph& g, uint32_t seed) {
  return test::randomInputs(g, seed);
}

TEST(ExecutorArena, SteadyStateAllocatesOnlyWhatTheStepReturns) {
  Graph g = mlpStep(256);
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  const MemoryPlan& plan = ex->memoryPlan();
  ASSERT_TRUE(checkPlan(plan).ok());
  size_t returned = 0, planned = 0;
  for (const BufferLife& b : plan.liveness.buffers) {
    returned += b.escapes;
    planned += b.planned();
  }
  ASSERT_GT(planned, 10u);
  std::set<std::string> donated;  // parameters and moments, as TrainingSession donates them
  size_t updates = 0;
  for (const GraphOutput& o : g.outputs())
    if (o.role == OutputRole::ParamUpdate || o.role == OutputRole::OptStateUpdate) {
      donated.insert(o.name);
      ++updates;
    }
  ASSERT_GT(updates, returned) << "the moments and parameters should be updated in place, not returned anew";
  TensorMap in = inputsFor(g, 1);
  const void* w1 = in.at("w1").raw();
  ASSERT_TRUE(ex->run(in, donated).ok());  // the first run allocates the arena
  const int64_t before = bufferPoolStats().allocations;
  auto out = ex->run(in, donated);
  ASSERT_TRUE(out.ok()) << out.error().message;
  const int64_t allocated = bufferPoolStats().allocations - before;
  EXPECT_EQ(allocated, static_cast<int64_t>(returned))
      << planned << " planned intermediates; " << returned << " returned buffers of their own";
  for (size_t k = 0; k < g.outputs().size(); ++k)
    if (g.outputs()[k].name == "w1") EXPECT_EQ((*out)[k].raw(), w1) << "w1 was not updated in place";
}

TEST(ExecutorArena, RunsFromTheArenaEqualFreshBuffersBitForBit) {
  Graph g = mlpStep(64);
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  EXPECT_GT(ex->memoryPlan().arena_bytes, 0u);
  EXPECT_LT(ex->memoryPlan().arena_bytes, ex->memoryPlan().unshared_bytes);
  // Two different batches through the same arena, then each again: stale
  // values of one run must not leak into the next.
  TensorMap a = inputsFor(g, 1), b = inputsFor(g, 2);
  auto ra = ex->run(a), rb = ex->run(b), ra2 = ex->run(a), rb2 = ex->run(b);
  ASSERT_TRUE(ra.ok() && rb.ok() && ra2.ok() && rb2.ok());
  for (size_t k = 0; k < ra->size(); ++k) {
    EXPECT_EQ(std::memcmp((*ra)[k].raw(), (*ra2)[k].raw(), (*ra)[k].bytes()), 0) << "output " << k;
    EXPECT_EQ(std::memcmp((*rb)[k].raw(), (*rb2)[k].raw(), (*rb)[k].bytes()), 0) << "output " << k;
  }
  // The outputs the caller holds are not in the arena: another run leaves them be.
  std::vector<Tensor> keep;
  for (const Tensor& t : *ra) keep.push_back(t.clone());
  ASSERT_TRUE(ex->run(b).ok());
  for (size_t k = 0; k < ra->size(); ++k)
    EXPECT_EQ(std::memcmp((*ra)[k].raw(), keep[k].raw(), keep[k].bytes()), 0) << "output " << k;
}

}  // namespace
}  // namespace kiln
