// --optimizer muon's step graph (passes/muon.h, passes/optimizer.cpp): which
// parameters Muon trains and which AdamW does, the state each gets, the
// Newton-Schulz products, and what is refused. The update's numbers are
// checked against torch.optim.Muon's written out in tests/train/reference.py
// (ctest train.f64.muon.*).
#include <gtest/gtest.h>

#include <algorithm>

#include "passes/muon.h"
#include "passes/optimizer.h"
#include "passes/pass_registry.h"
#include "passes/training_graph.h"
#include "tests/parse_or_fail.h"

namespace kiln {
namespace {

// A token embedding, a hidden matrix used tall (8 x 3: Newton-Schulz runs on
// its transpose), a bias, and an output layer: a [3, 5] matrix of its own.
const char* kForward = R"(graph lm(%idx: i64[2] data, %emb.w: f32[10,8] param, %hidden.w: f32[8,3] param, %hidden.b: f32[3] param, %out.w: f32[3,5] param) {
  %0 = embedding(%emb.w, %idx) : f32[2,8] @emb
  %1 = matmul(%0, %hidden.w) : f32[2,3] @hidden
  %2 = add(%1, %hidden.b) : f32[2,3] @hidden
  %3 = matmul(%2, %out.w) : f32[2,5] @out
  %4 = mean(%3) : f32[] @out
  return %4 "output0"
}
)";

Result<Graph> muonStep(const std::set<std::string>& frozen = {}, double clip = 0) {
  Graph fwd = test::parse(kForward);
  PassContext ctx;
  ctx.training.loss = LossKind::Model;
  ctx.training.optimizer.kind = OptimizerKind::Muon;
  ctx.training.optimizer.clip_grad_norm = clip;
  ctx.training.frozen = frozen;
  auto pipeline = resolvePipeline({"loss", "autodiff", "optimizer", "freeze", "dce"});
  EXPECT_TRUE(pipeline.ok()) << pipeline.error().message;
  return buildTrainingGraph(fwd, ctx, TrainingGraphKind::Step, nullptr, {.verify_each = true}, *pipeline);
}

size_t count(const Graph& g, Op op) {
  return static_cast<size_t>(std::ranges::count_if(g.nodes(), [&](const auto& n) { return n->is(op); }));
}

TEST(Muon, TrainsTheMatricesNoEmbeddingReadsAndAdamWTheRest) {
  auto g = muonStep();
  ASSERT_TRUE(g.ok()) << g.error().message;
  for (const char* m : {"hidden.w", "out.w"}) {
    EXPECT_NE(g->findInput(optimizerStateName("momentum_buffer", m)), nullptr) << m;
    EXPECT_EQ(g->findInput(optimizerStateName("exp_avg", m)), nullptr) << m;
  }
  for (const char* a : {"emb.w", "hidden.b"}) {
    EXPECT_NE(g->findInput(optimizerStateName("exp_avg", a)), nullptr) << a;
    EXPECT_NE(g->findInput(optimizerStateName("exp_avg_sq", a)), nullptr) << a;
    EXPECT_EQ(g->findInput(optimizerStateName("momentum_buffer", a)), nullptr) << a;
  }
  const Value* lr = g->findInput(kMuonLearningRateInput);
  ASSERT_NE(lr, nullptr);
  EXPECT_EQ(lr->role(), ValueRole::Scalar);
  // One AdamW node for the embedding and the bias (decoupled: AdamW's rule).
  ASSERT_EQ(count(*g, Op::adam_update), 1u);
  for (const auto& n : g->nodes())
    if (n->is(Op::adam_update)) EXPECT_EQ(n->i("decoupled"), 1);
  // Per matrix 5 rounds of 3 products, in bfloat16, beside the forward's 2 and the backward's.
  size_t bf16_products = 0;
  for (const auto& n : g->nodes())
    if (n->is(Op::matmul) && n->output()->dtype() == DType::BF16) ++bf16_products;
  EXPECT_EQ(bf16_products, 2u * 5u * 3u);
  // Every parameter is updated; each matrix's momentum buffer too.
  size_t params = 0, buffers = 0;
  for (const GraphOutput& o : g->outputs()) {
    params += o.role == OutputRole::ParamUpdate;
    buffers += o.role == OutputRole::OptStateUpdate && o.name.starts_with("momentum_buffer.");
  }
  EXPECT_EQ(params, 4u);
  EXPECT_EQ(buffers, 2u);
}

TEST(Muon, ClipsWithTheGlobalNormOfEveryGradient) {
  auto g = muonStep({}, 1.0);
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_EQ(count(*g, Op::global_norm), 1u + 2u);  // clipping's, and each matrix's Frobenius norm
  for (const auto& n : g->nodes())
    if (n->is(Op::global_norm) && n->numInputs() > 1) EXPECT_EQ(n->numInputs(), 4u);
}

TEST(Muon, FreezesAdamWParametersAndRefusesToFreezeAMatrix) {
  auto g = muonStep({"emb.w"});
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->findInput(optimizerStateName("exp_avg", "emb.w")), nullptr);
  EXPECT_NE(g->findInput(optimizerStateName("momentum_buffer", "hidden.w")), nullptr);
  auto refused = muonStep({"hidden.w"});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("freezing 'hidden.w', a matrix Muon trains, is not supported"),
            std::string::npos)
      << refused.error().message;
}

TEST(Muon, ChoosesFloatingPointMatricesNoEmbeddingReads) {
  Graph g = test::parse(kForward);
  for (const char* name : {"hidden.w", "out.w"}) EXPECT_TRUE(trainsWithMuon(*g.findInput(name))) << name;
  for (const char* name : {"emb.w", "hidden.b", "idx"}) EXPECT_FALSE(trainsWithMuon(*g.findInput(name))) << name;
}

}  // namespace
}  // namespace kiln
