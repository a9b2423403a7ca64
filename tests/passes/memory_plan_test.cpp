// memory_plan (passes/memory_plan.h) and the liveness it reads
// (core/liveness.h): lifetimes of buffers and views, what is not placed,
// arena sizes on hand-checkable chains, and on random graphs and a whole
// training step that no two buffers alive together overlap.
#include <gtest/gtest.h>

#include <random>

#include "core/graph_cost.h"
#include "core/text_ir.h"
#include "passes/memory_plan.h"
#include "passes/training_graph.h"
#include "tests/parse_or_fail.h"
#include "tests/passes/random_graph.h"

namespace kiln {
namespace {

using test::parse;

/// The output of the k-th node (text IR numbers node outputs itself).
const Value* out(const Graph& g, size_t k) {
  return (*std::next(g.nodes().begin(), static_cast<long>(k)))->output();
}

const BufferLife& bufferOf(const MemoryPlan& p, const Graph& g, size_t k) {
  return p.liveness.buffers[p.liveness.buffer_of.at(out(g, k))];
}

int64_t offsetOf(const MemoryPlan& p, const Graph& g, size_t k) {
  return p.offsets[p.liveness.buffer_of.at(out(g, k))];
}

// A chain of equal-size tensors: a buffer dies at the node that reads it
// last, but that node's output is made while it is alive, so two slots
// alternate: a and c share one, b the other.
TEST(MemoryPlan, ChainAlternatesBetweenTwoSlots) {
  Graph g = parse(R"(graph chain(%x: f32[1000] data) {
  %a = relu(%x) : f32[1000]
  %b = exp(%a) : f32[1000]
  %c = neg(%b) : f32[1000]
  %d = tanh(%c) : f32[1000]
  return %d "out"
})");
  MemoryPlan p = planMemory(g);
  ASSERT_TRUE(checkPlan(p).ok()) << checkPlan(p).error().message;
  EXPECT_EQ(bufferOf(p, g, 0).def, 0u);
  EXPECT_EQ(bufferOf(p, g, 0).last, 1u);
  EXPECT_TRUE(bufferOf(p, g, 3).escapes);
  EXPECT_EQ(offsetOf(p, g, 3), -1) << "returned buffers leave the step: not in the arena";
  EXPECT_EQ(offsetOf(p, g, 0), offsetOf(p, g, 2));
  EXPECT_NE(offsetOf(p, g, 0), offsetOf(p, g, 1));
  EXPECT_EQ(p.arena_bytes, 2 * arenaSize(4000));
  EXPECT_EQ(p.arena_lower_bound, p.arena_bytes);
  EXPECT_EQ(p.unshared_bytes, 3 * arenaSize(4000));
  EXPECT_EQ(p.input_bytes, 4000u);
  EXPECT_EQ(p.returned_bytes, 4000u);
  // x, one intermediate dying and the next being made: 3 tensors at once.
  EXPECT_EQ(p.peak_bytes, 3 * 4000u);
  EXPECT_EQ(p.peak_bytes, estimatePeakBytes(g));
}

// A view (reshape) has no buffer: it keeps its source alive until the view's
// own last use, and returning a view keeps the source out of the arena.
TEST(MemoryPlan, ViewsExtendTheirSourcesLife) {
  Graph g = parse(R"(graph views(%x: f32[4,8] data) {
  %a = exp(%x) : f32[4,8]
  %r = reshape(%a) {shape=[32]} : f32[32]
  %b = neg(%x) : f32[4,8]
  %c = relu(%b) : f32[4,8]
  %s = sum(%r) : f32[]
  %e = exp(%x) : f32[4,8]
  %v = reshape(%e) {shape=[32]} : f32[32]
  return %s "s", %c "c", %v "v"
})");
  MemoryPlan p = planMemory(g);
  ASSERT_TRUE(checkPlan(p).ok()) << checkPlan(p).error().message;
  const BufferLife& a = bufferOf(p, g, 0);
  EXPECT_EQ(a.last, 4u) << "a lives while its view %r is read by the sum (node 4)";
  ASSERT_EQ(a.views.size(), 1u);
  EXPECT_EQ(a.views[0], out(g, 1));
  EXPECT_EQ(p.liveness.buffer_of.at(a.views[0]), p.liveness.buffer_of.at(a.value));
  EXPECT_TRUE(bufferOf(p, g, 5).escapes) << "returned through its view";
  EXPECT_EQ(offsetOf(p, g, 5), -1);
  EXPECT_GE(offsetOf(p, g, 0), 0);
  EXPECT_NE(offsetOf(p, g, 0), offsetOf(p, g, 2)) << "a and b are alive together";
}

// Random DAGs of elementwise ops and reductions over a few sizes, with
// elementwise results written in place: every plan is valid, between its lower bound and one buffer each, and the
// timeline agrees with the peak estimate.
TEST(MemoryPlan, RandomGraphsGetValidPlans) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    Graph g = test::randomGraph(rng);
    SCOPED_TRACE("trial " + std::to_string(trial));
    MemoryPlan p = planMemory(g, MemoryRules{});
    Status st = checkPlan(p);
    ASSERT_TRUE(st.ok()) << st.error().message << "\n" << printGraph(g);
    EXPECT_GE(p.arena_bytes, p.arena_lower_bound);
    EXPECT_LE(p.arena_bytes, p.unshared_bytes);
    EXPECT_EQ(p.peak_bytes, estimatePeakBytes(g));
  }
}

// Elementwise results take over the buffer of an input of their type that
// nothing reads later, as relu_ would; never a graph input's, a buffer read
// again, one the node also reads through a view, or for a returned result.
TEST(MemoryPlan, ElementwiseResultsOverwriteTheInputTheyReadLast) {
  Graph g = parse(R"(graph ew(%x: f32[10,10] data) {
  %a = exp(%x) : f32[10,10]
  %b = neg(%a) : f32[10,10]
  %c = relu(%b) : f32[10,10]
  %d = add(%c, %b) : f32[10,10]
  %p = permute(%d) {dims=[1,0]} : f32[10,10]
  %e = add(%d, %p) : f32[10,10]
  %f = sum(%e) : f32[]
  %h = exp(%e) : f32[10,10]
  return %f "f", %h "h"
})");
  const Liveness plain = analyzeLiveness(g);
  const InPlaceUpdates w = elementwiseInPlace(plain);
  auto over = [&](size_t k) -> const Value* {
    auto it = w.find(out(g, k));
    return it == w.end() ? nullptr : it->second;
  };
  EXPECT_EQ(over(0), nullptr) << "x is a graph input";
  EXPECT_EQ(over(1), out(g, 0)) << "b is written over a, which only it reads";
  EXPECT_EQ(over(2), nullptr) << "b is read again by d";
  EXPECT_EQ(over(3), out(g, 2)) << "d over c (b dies here too, but c comes first)";
  EXPECT_EQ(over(5), nullptr) << "e would overwrite d while reading it transposed through p";
  EXPECT_EQ(over(7), nullptr) << "h is returned: it leaves the step";
  EXPECT_EQ(w.size(), 2u);
  const InPlaceUpdates all = analyzeStepLiveness(g).all();
  MemoryPlan p = planMemory(g, {}, &all);
  ASSERT_TRUE(checkPlan(p).ok()) << checkPlan(p).error().message;
  EXPECT_EQ(p.liveness.buffer_of.at(out(g, 1)), p.liveness.buffer_of.at(out(g, 0)));
  EXPECT_EQ(p.peak_bytes, estimatePeakBytes(g));
  EXPECT_LT(p.peak_bytes, planMemory(g).peak_bytes);
}

// batch_norm_backward (kOutput0OverInput) writes grad_x over g or x like an
// elementwise result, preferring the input whose other readers ran longest
// ago: the second of two siblings reading one gradient takes its own x, so
// the two may still run side by side.
TEST(MemoryPlan, BatchNormBackwardWritesGradOverTheInputReadLongestAgo) {
  Graph g = parse(R"(graph bn(%x: f32[4,3,2,2] data, %w: f32[3] param) {
  %c1 = neg(%x) : f32[4,3,2,2]
  %c2 = exp(%x) : f32[4,3,2,2]
  %g = relu(%x) : f32[4,3,2,2]
  %gx1, %gw1, %gb1 = batch_norm_backward(%g, %c1, %w) {training=1} : f32[4,3,2,2], f32[3], f32[3]
  %gx2, %gw2, %gb2 = batch_norm_backward(%g, %c2, %w) {training=1} : f32[4,3,2,2], f32[3], f32[3]
  %s = add(%gx1, %gx2) : f32[4,3,2,2]
  %t = sum(%s) : f32[]
  return %t "t", %gw1 "gw1", %gw2 "gw2"
})");
  const InPlaceUpdates w = elementwiseInPlace(analyzeLiveness(g));
  auto over = [&](size_t k) -> const Value* {
    auto it = w.find(out(g, k));
    return it == w.end() ? nullptr : it->second;
  };
  EXPECT_EQ(over(3), out(g, 0)) << "g is read again by the second: grad_x over c1";
  EXPECT_EQ(over(4), out(g, 1)) << "g and c2 both die here; c2's other reader ran first";
  EXPECT_EQ(over(5), out(g, 3)) << "s over gx1";
}

// checkPlan is what the tests above rely on: it must reject a plan that puts
// two buffers alive together at the same offset.
TEST(MemoryPlan, CheckPlanRejectsOverlappingBuffers) {
  Graph g = parse(R"(graph two(%x: f32[100] data) {
  %a = exp(%x) : f32[100]
  %b = neg(%x) : f32[100]
  %c = add(%a, %b) : f32[100]
  return %c "out"
})");
  MemoryPlan p = planMemory(g);
  ASSERT_TRUE(checkPlan(p).ok());
  const size_t a = p.liveness.buffer_of.at(out(g, 0));
  const size_t b = p.liveness.buffer_of.at(out(g, 1));
  p.offsets[b] = p.offsets[a];
  Status st = checkPlan(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("overlap"), std::string::npos) << st.error().message;
  p.offsets[b] = 3;  // unaligned
  EXPECT_FALSE(checkPlan(p).ok());
}

// A whole AdamW training step: valid plan, and sharing slots saves memory.
TEST(MemoryPlan, TrainingStepPlanSharesSlots) {
  auto fwd = parseGraph(
      R"(graph mlp(%input0: f32[64,32] data, %w1: f32[128,32] param, %b1: f32[128] param, %w2: f32[10,128] param, %b2: f32[10] param) {
  %0 = linear(%input0, %w1, %b1) : f32[64,128] @fc1
  %1 = relu(%0) : f32[64,128] @act
  %2 = linear(%1, %w2, %b2) : f32[64,10] @fc2
  return %2 "output0"
})",
      "mlp");
  ASSERT_TRUE(fwd.ok()) << fwd.error().message;
  PassContext ctx;
  ctx.training.loss = LossKind::CrossEntropy;
  ctx.training.target = TensorType{DType::I64, {64}};
  auto g = buildTrainingGraph(*fwd, ctx, TrainingGraphKind::Step);
  ASSERT_TRUE(g.ok()) << g.error().message;
  const InPlaceUpdates in_place = inPlaceCandidates(*g, analyzeLiveness(*g));
  EXPECT_EQ(in_place.size(), 13u) << "4 parameters and their 8 moments, and the step counter, in place";
  MemoryPlan p = planMemory(*g, {}, &in_place);
  ASSERT_TRUE(checkPlan(p).ok()) << checkPlan(p).error().message;
  EXPECT_GT(p.input_bytes, 0u);
  EXPECT_GT(p.returned_bytes, 0u) << "the loss leaves the step";
  EXPECT_LT(p.arena_bytes, p.unshared_bytes);
  EXPECT_EQ(p.peak_bytes, estimatePeakBytes(*g));
  const std::vector<size_t> at_peak = buffersLiveAt(p, p.peak_node);
  ASSERT_FALSE(at_peak.empty());
  uint64_t sum = 0;
  for (size_t i : at_peak) sum += p.liveness.buffers[i].bytes;
  EXPECT_EQ(sum, p.peak_bytes) << "the buffers listed at the peak add up to it";
}

}  // namespace
}  // namespace kiln
