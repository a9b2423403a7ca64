// The autodiff pass as a whole: fan-out and tied parameters, what gets a
// gradient and what does not, and its errors. Per-op rules are checked in
// tests/passes/grad_*_test.cpp.
#include <gtest/gtest.h>

#include <random>

#include "core/text_ir.h"
#include "passes/autodiff.h"
#include "tests/passes/grad_check.h"
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

// %w feeds three uses (two through one mul): its gradients must add up.
const char* kFanOut = R"(graph fanout(%x: f64[3,4] data, %w: f64[4] param, %b: f64[4] param) {
  %0 = mul(%x, %w) : f64[3,4]
  %1 = mul(%0, %w) : f64[3,4]
  %2 = add(%1, %w) : f64[3,4]
  %3 = add(%2, %b) : f64[3,4]
  %4 = relu(%3) : f64[3,4]
  %5 = mean(%4) : f64[]
  return %5 "loss" loss
}
)";

TEST(Autodiff, FanOutAccumulatesAndMatchesFiniteDifferences) {
  Graph g = parse(kFanOut);
  EXPECT_TRUE(testing::checkGraphGrad(g, randomInputs(g, 3), {"w", "b"}));
}

TEST(Autodiff, PassAddsOneGradientOutputPerTrainedParameter) {
  Graph g = parse(kFanOut);
  PassContext ctx;
  auto r = runAutodiff(g, ctx);
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::vector<std::string> names;
  for (const GraphOutput& o : g.outputs())
    if (o.role == OutputRole::Gradient) {
      names.push_back(o.name);
      EXPECT_EQ(o.value->type(), g.findInput(o.name)->type());
    }
  EXPECT_EQ(names, (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(r->statistics.at("params_with_grad"), 2);
}

TEST(Autodiff, UnusedParametersGetNoGradientFrozenOnesDo) {
  // Autodiff differentiates every parameter; the freeze pass (passes/
  // freeze.h, tests/passes/freeze_test.cpp) removes what frozen ones get.
  Graph g = parse(R"(graph g(%x: f64[3] data, %a: f64[3] param, %unused: f64[3] param, %frozen: f64[3] param) {
  %0 = mul(%x, %a) : f64[3]
  %1 = mul(%0, %frozen) : f64[3]
  %2 = sum(%1) : f64[]
  return %2 "loss" loss
}
)");
  PassContext ctx;
  ctx.training.frozen = {"frozen"};
  auto r = runAutodiff(g, ctx);
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::vector<std::string> names;
  for (const GraphOutput& o : g.outputs())
    if (o.role == OutputRole::Gradient) names.push_back(o.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "frozen"}));
  EXPECT_EQ(r->statistics.at("params_without_grad"), 1);  // unused
}

TEST(Autodiff, NoGradientFlowsThroughIntegerResults) {
  // argmax has no gradient: the loss depends on %w only through %0 * %w.
  Graph g = parse(R"(graph g(%x: f64[4] data, %w: f64[4] param) {
  %0 = argmax(%w) {dim=0} : i64[]
  %1 = cast(%0) {dtype=f64} : f64[]
  %2 = mul(%x, %w) : f64[4]
  %3 = mul(%2, %1) : f64[4]
  %4 = sum(%3) : f64[]
  return %4 "loss" loss
}
)");
  EXPECT_TRUE(testing::checkGraphGrad(g, randomInputs(g, 5), {"w"}));
}

TEST(Autodiff, LossMustBeAScalar) {
  Graph g = parse(R"(graph g(%w: f32[4] param) {
  %0 = relu(%w) : f32[4]
  return %0 "loss" loss
}
)");
  PassContext ctx;
  auto r = runAutodiff(g, ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("0-d"), std::string::npos) << r.error().message;
}

TEST(Autodiff, OpWithoutRuleIsANamedError) {
  // optimizer ops are never differentiated; use one to stand for "no rule".
  Graph g = parse(R"(graph g(%w: f32[4] param, %lr: f32[] scalar) {
  %0 = global_norm(%w) : f32[]
  %1 = mul(%0, %lr) : f32[]
  return %1 "loss" loss
}
)");
  PassContext ctx;
  auto r = runAutodiff(g, ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("op 'global_norm' has no gradient rule"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace kiln
