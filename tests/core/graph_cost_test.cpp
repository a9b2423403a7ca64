// graphFlops and estimatePeakBytes on small graphs whose sizes are easy to
// add up by hand (f32: 4 bytes an element).
#include <gtest/gtest.h>

#include "core/graph_cost.h"
#include "core/op_table.h"
#include "core/text_ir.h"
#include "tests/parse_or_fail.h"

namespace kiln {
namespace {

using test::parse;

TEST(GraphCost, FlopsAreTheSumOfTheOpTableCosts) {
  Graph g = parse(R"(graph g(%x: f32[8,16] data, %w: f32[16,4] param) {
  %0 = matmul(%x, %w) : f32[8,4]
  %1 = relu(%0) : f32[8,4]
  return %1 "output0"
}
)");
  double want = 0;
  for (const auto& n : g.nodes()) want += nodeCost(*n).flops;
  EXPECT_EQ(graphFlops(g), want);
  EXPECT_GE(graphFlops(g), 2.0 * 8 * 16 * 4);  // a GEMM's multiply-adds at least
  EXPECT_EQ(graphFlops(parse("graph e(%x: f32[2] data) {\n  return %x \"output0\"\n}\n")), 0);
}

TEST(GraphCost, InputsLiveThroughoutIntermediatesUntilTheirLastUse) {
  // Inputs: x 400 B. Running %0 (exp, 400 B): 800. %1 (sum over dim 1 of
  // [10,10], 40 B): 840, then %0 dies: 440. %2 (mul, 40 B): 480, %1 dies.
  // The peak is 840 B: while %1 is made, x and %0 are still alive.
  Graph g = parse(R"(graph g(%x: f32[10,10] data) {
  %0 = exp(%x) : f32[10,10]
  %1 = sum(%0) {dims=[1]} : f32[10]
  %2 = mul(%1, %1) : f32[10]
  return %2 "output0"
}
)");
  EXPECT_EQ(estimatePeakBytes(g), 840u);
}

TEST(GraphCost, GraphOutputsStayToTheEnd) {
  // %0 (400 B) is a graph output: it never dies, so %1 and %2 stack on it:
  // 400 (x) + 400 (%0) + 400 (%1) + 400 (%2) = 1600; were %0 not an
  // output it would die after %1, and the peak would be 1200.
  const char* text = R"(graph g(%x: f32[10,10] data) {
  %0 = exp(%x) : f32[10,10]
  %1 = tanh(%0) : f32[10,10]
  %2 = neg(%1) : f32[10,10]
  return %2 "output0", %0 "output1"
}
)";
  EXPECT_EQ(estimatePeakBytes(parse(text)), 1600u);
  Graph g = parse(text);
  g.mutableOutputs().pop_back();
  EXPECT_EQ(estimatePeakBytes(g), 1200u);
}

TEST(GraphCost, ViewsAliasTheirSourceAndKeepItAlive) {
  // %1 (reshape) and %2 (permute) are views of %0's 400 B: they add
  // nothing, but keep %0 alive until %3 reads %2. Peak: x 400 + %0 400 +
  // %3 400 = 1200. A cat (kView trait, but new memory) counts.
  Graph g = parse(R"(graph g(%x: f32[10,10] data) {
  %0 = exp(%x) : f32[10,10]
  %1 = reshape(%0) {shape=[100]} : f32[100]
  %2 = reshape(%1) {shape=[10,10]} : f32[10,10]
  %3 = neg(%2) : f32[10,10]
  return %3 "output0"
}
)");
  EXPECT_EQ(estimatePeakBytes(g), 1200u);
  Graph c = parse(R"(graph c(%x: f32[10] data) {
  %0 = cat(%x, %x) {dim=0} : f32[20]
  return %0 "output0"
}
)");
  EXPECT_FALSE(mayAliasInput(*c.nodes().front()));
  EXPECT_EQ(estimatePeakBytes(c), 40u + 80u);
}

TEST(GraphCost, UnreadOutputsAreFreedAtOnceAndParamsCount) {
  // Params and optimizer state count like any input: w 64 B + x 40 B.
  // %0 (40 B) is read by nobody: allocated while its node runs, then gone.
  // %1 (40 B) is the output. Peak 104 + 40 = 144.
  Graph g = parse(R"(graph g(%x: f32[10] data, %w: f32[16] param) {
  %0 = exp(%x) : f32[10]
  %1 = neg(%x) : f32[10]
  return %1 "output0"
}
)");
  EXPECT_EQ(estimatePeakBytes(g), 144u);
}

}  // namespace
}  // namespace kiln
