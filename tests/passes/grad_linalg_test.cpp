// Finite-difference checks of the matmul and linear gradient rules over all
// of torch.matmul's cases (1-D operands, batched, broadcasting batch dims),
// and checks that the weight gradients of batched products are one GEMM
// (the batch folded into the contraction), not a batched product and a sum.
#include <algorithm>
#include <iterator>

#include "passes/autodiff.h"
#include "tests/passes/grad_check.h"

namespace kiln::testing {
namespace {

TEST(GradLinalg, MatmulVectors) {
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({4}), f64({4})}}));           // dot
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({3, 4}), f64({4})}}));        // matrix-vector
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({2, 3, 4}), f64({4})}}));     // batched matrix-vector
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({4}), f64({4, 5})}}));        // vector-matrix
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({4}), f64({2, 4, 5})}}));     // vector-batched matrix
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({4}), f64({2, 1, 4, 3})}}));  // 4-D
}

TEST(GradLinalg, MatmulMatrices) {
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({3, 4}), f64({4, 5})}}));
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({1, 4}), f64({4, 1})}}));
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({2, 3, 4}), f64({2, 4, 5})}}));
  // One side batched: the other's gradient folds the batch into one GEMM.
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({2, 3, 4}), f64({4, 5})}}));
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({3, 4}), f64({2, 4, 5})}}));
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({2, 2, 3, 4}), f64({4, 2})}}));
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({3, 4}), f64({2, 2, 4, 2})}}));
  // Broadcasting batch dims.
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({2, 1, 3, 4}), f64({3, 4, 2})}}));
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({1, 3, 4}), f64({2, 4, 5})}}));
  EXPECT_TRUE(checkGrad({.op = "matmul", .inputs = {f64({2, 1, 2, 3}), f64({1, 3, 3, 2})}}));
}

// gemm's rule writes each gradient as one gemm with flags (no permute), for
// every flag pair and with broadcast batch dims summed away.
TEST(GradLinalg, GemmEveryFlagPair) {
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1}) {
      const AttrMap attrs = {{"trans_a", ta}, {"trans_b", tb}};
      auto stored = [](Shape s, bool t) {
        if (t) std::swap(s[s.size() - 2], s.back());
        return f64(s);
      };
      EXPECT_TRUE(checkGrad({.op = "gemm", .attrs = attrs, .inputs = {stored({3, 4}, ta), stored({4, 5}, tb)}}))
          << ta << tb;
      EXPECT_TRUE(checkGrad({.op = "gemm", .attrs = attrs, .inputs = {stored({2, 3, 4}, ta), stored({4, 5}, tb)}}))
          << ta << tb;
      EXPECT_TRUE(
          checkGrad({.op = "gemm", .attrs = attrs, .inputs = {stored({2, 1, 3, 4}, ta), stored({3, 4, 2}, tb)}}))
          << ta << tb;
    }
}

TEST(GradLinalg, Linear) {
  EXPECT_TRUE(checkGrad({.op = "linear", .inputs = {f64({3, 4}), f64({2, 4}), f64({2})}}));
  EXPECT_TRUE(checkGrad({.op = "linear", .inputs = {f64({3, 4}), f64({2, 4})}}));         // no bias
  EXPECT_TRUE(checkGrad({.op = "linear", .inputs = {f64({4}), f64({3, 4}), f64({3})}}));  // 1-D input
  EXPECT_TRUE(checkGrad({.op = "linear", .inputs = {f64({2, 3, 4}), f64({5, 4}), f64({5})}}));
  EXPECT_TRUE(checkGrad({.op = "linear", .inputs = {f64({2, 1, 3, 4}), f64({2, 4})}}));
  // Frozen weight: only x and the bias get gradients.
  EXPECT_TRUE(checkGrad({.op = "linear", .inputs = {f64({2, 3, 4}), f64({5, 4}), f64({5})}, .no_grad = {1}}));
}

/// Ops of the nodes autodiff appends for d loss / d `wrt` of sum(op(a, b) * w).
std::vector<std::string> backwardOps(const std::string& op, std::vector<TensorType> ins, size_t wrt) {
  Graph g;
  std::vector<Value*> vs;
  for (size_t i = 0; i < ins.size(); ++i)
    vs.push_back(g.addInput("x" + std::to_string(i), ins[i], i == wrt ? ValueRole::Param : ValueRole::Data));
  Value* y = g.add(op, vs);
  Value* w = g.addInput("w", y->type(), ValueRole::Data);
  Value* loss = g.add("sum", {g.add("mul", {y, w})});
  g.addOutput(loss, "loss", OutputRole::Loss);
  size_t forward = g.nodes().size();
  auto grads = differentiate(g, loss, {vs[wrt]});
  EXPECT_TRUE(grads.ok());
  std::vector<std::string> ops;
  for (auto it = std::next(g.nodes().begin(), static_cast<long>(forward)); it != g.nodes().end(); ++it)
    ops.push_back((*it)->op());
  return ops;
}

TEST(GradLinalg, GemmGradientsAreGemms) {
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1})
      for (size_t wrt : {0, 1}) {
        Graph g;
        Value* a = g.addInput("a", f64({3, 3}), wrt == 0 ? ValueRole::Param : ValueRole::Data);
        Value* b = g.addInput("b", f64({3, 3}), wrt == 1 ? ValueRole::Param : ValueRole::Data);
        Value* y = g.add("gemm", {a, b}, {{"trans_a", ta}, {"trans_b", tb}});
        Value* loss = g.add("sum", {y});
        g.addOutput(loss, "loss", OutputRole::Loss);
        const size_t forward = g.nodes().size();
        ASSERT_TRUE(differentiate(g, loss, {wrt == 0 ? a : b}).ok());
        for (auto it = std::next(g.nodes().begin(), static_cast<long>(forward)); it != g.nodes().end(); ++it)
          EXPECT_NE((*it)->op(), "permute") << ta << tb << wrt;
      }
}

TEST(GradLinalg, BatchedWeightGradientIsOneGemm) {
  auto count = [](const std::vector<std::string>& ops, const char* op) {
    return std::count(ops.begin(), ops.end(), op);
  };
  auto lin = backwardOps("linear", {f64({2, 3, 4}), f64({5, 4}), f64({5})}, 1);
  EXPECT_EQ(count(lin, "matmul"), 1);
  EXPECT_EQ(count(lin, "sum"), 0);
  auto right = backwardOps("matmul", {f64({2, 3, 4}), f64({4, 5})}, 1);
  EXPECT_EQ(count(right, "matmul"), 1);
  EXPECT_EQ(count(right, "sum"), 0);
  auto left = backwardOps("matmul", {f64({3, 4}), f64({2, 4, 5})}, 0);
  EXPECT_EQ(count(left, "matmul"), 1);
  EXPECT_EQ(count(left, "sum"), 0);
}

}  // namespace
}  // namespace kiln::testing
