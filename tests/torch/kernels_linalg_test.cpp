// CPU linalg kernels (matmul, gemm, linear) against libtorch on seeded
// random inputs: every torch.matmul shape rule, gemm's transposed operands
// on every batch rule (BLAS, oneDNN and the reference loops), linear with and
// without bias, f64, and amp's bf16 GEMMs (oneDNN's bf16 matmul, or the f32
// fallback) on every shape rule against libtorch's bf16 products.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "backend/cpu/cpu_features.h"
#include "backend/kernel.h"
#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

class KernelsLinalg : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(1234); }
};

void checkMatmul(std::vector<int64_t> a, std::vector<int64_t> b, torch::ScalarType dt = torch::kFloat32) {
  auto x = torch::randn(a, dt), y = torch::randn(b, dt);
  auto out = runOp("matmul", {x, y});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::matmul(x, y), 1e-5,
              "matmul " + shapeStr(Shape(a.begin(), a.end())) + " @ " + shapeStr(Shape(b.begin(), b.end())));
}

TEST_F(KernelsLinalg, MatmulVectorVector) {
  checkMatmul({7}, {7});
}
TEST_F(KernelsLinalg, MatmulVectorMatrix) {
  checkMatmul({5}, {5, 9});
}
TEST_F(KernelsLinalg, MatmulMatrixVector) {
  checkMatmul({6, 5}, {5});
}
TEST_F(KernelsLinalg, MatmulMatrixMatrix) {
  checkMatmul({33, 17}, {17, 45});
}
TEST_F(KernelsLinalg, MatmulBatchedTimesMatrixFoldsBatch) {
  checkMatmul({3, 4, 8, 16}, {16, 5});
}
TEST_F(KernelsLinalg, MatmulMatrixTimesBatched) {
  checkMatmul({8, 16}, {3, 16, 5});
}
TEST_F(KernelsLinalg, MatmulBroadcastBatchDims) {
  checkMatmul({2, 1, 4, 6}, {3, 6, 5});
  checkMatmul({1, 4, 6}, {2, 3, 6, 5});
}
TEST_F(KernelsLinalg, MatmulBatchedVector) {
  checkMatmul({3, 4, 6}, {6});
  checkMatmul({6}, {2, 6, 4});
}
TEST_F(KernelsLinalg, MatmulAttentionShapes) {
  // scores = q @ k^T, then attn @ v, as in multi-head attention.
  auto q = torch::randn({2, 4, 10, 16}), k = torch::randn({2, 4, 10, 16}), v = torch::randn({2, 4, 10, 16});
  auto kt = k.transpose(-1, -2).contiguous();
  auto scores = runOp("matmul", {q, kt});
  ASSERT_EQ(scores.size(), 1u);
  expectClose(scores[0], torch::matmul(q, kt), 1e-5, "q @ k^T");
  auto attn = torch::softmax(scores[0], -1);
  auto out = runOp("matmul", {attn, v});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::matmul(attn, v), 1e-5, "attn @ v");
}
TEST_F(KernelsLinalg, MatmulF64) {
  checkMatmul({2, 7, 9}, {2, 9, 3}, torch::kFloat64);
}
// bf16 keeps 8 mantissa bits: Kiln accumulates in f32 and rounds once, and
// so does the reference, libtorch's product of the same bf16 values in f32
// rounded to bf16 (libtorch's own bf16 matmul accumulates in bf16 on CPUs
// without bf16 instructions: 5% off the exact product at [96,256] @
// [256,384] on an AVX2-only CPU); they agree to about one bf16 rounding of
// the largest output.
constexpr double kBf16Tol = 1e-2;

TEST_F(KernelsLinalg, MatmulBF16EveryShapeRule) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {{{7}, {7}},
                                                                                    {{5}, {5, 9}},
                                                                                    {{6, 5}, {5}},
                                                                                    {{33, 17}, {17, 45}},
                                                                                    {{3, 4, 8, 16}, {16, 5}},
                                                                                    {{8, 16}, {3, 16, 5}},
                                                                                    {{2, 1, 4, 6}, {3, 6, 5}},
                                                                                    {{3, 4, 6}, {6}},
                                                                                    {{6}, {2, 6, 4}},
                                                                                    {{2, 4, 64, 32}, {2, 4, 32, 64}},
                                                                                    {{96, 256}, {256, 384}}};
  for (const auto& [a, b] : cases) {
    auto x = torch::randn(a).to(torch::kBFloat16), y = torch::randn(b).to(torch::kBFloat16);
    auto out = runOp("matmul", {x, y});
    ASSERT_EQ(out.size(), 1u);
    expectClose(out[0], torch::matmul(x.to(torch::kFloat32), y.to(torch::kFloat32)).to(torch::kBFloat16), kBf16Tol,
                "bf16 matmul " + shapeStr(Shape(a.begin(), a.end())) + " @ " + shapeStr(Shape(b.begin(), b.end())));
  }
}

// gemm reads an operand stored transposed ([.., k, m] for a, [.., p, k] for
// b); libtorch computes the product of the logical matrices. Every flag pair
// on every batch rule, in f64, f32 and bf16, with the default kernels (BLAS,
// oneDNN for bf16) and with the reference loops only. The bf16 reference is
// libtorch's product in f32 rounded once (Kiln's kernels accumulate in f32;
// libtorch 1.13's bf16 dot product of a [1, k] x [k, 1] does not).
TEST_F(KernelsLinalg, GemmTransposedOperandsEveryBatchRule) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{33, 17}, {17, 45}},        {{3, 4, 8, 16}, {16, 5}}, {{8, 16}, {3, 16, 5}},  {{2, 1, 4, 6}, {3, 6, 5}},
      {{2, 4, 64, 32}, {2, 4, 32, 64}}, {{96, 256}, {256, 384}}, {{1, 7}, {7, 1}}};
  const std::vector<std::pair<torch::ScalarType, double>> types = {
      {torch::kFloat64, 1e-12}, {torch::kFloat32, 1e-5}, {torch::kBFloat16, kBf16Tol}};
  for (const auto& [dt, tol] : types)
    for (const std::vector<std::string>& dialects : {std::vector<std::string>{}, std::vector<std::string>{"cpu"}})
      for (const auto& [a, b] : cases)
        for (int64_t ta : {0, 1})
          for (int64_t tb : {0, 1}) {
            auto x = torch::randn(a).to(dt), y = torch::randn(b).to(dt);
            auto xs = ta ? x.transpose(-2, -1).contiguous() : x, ys = tb ? y.transpose(-2, -1).contiguous() : y;
            auto out = runOp("gemm", {xs, ys}, {{"trans_a", ta}, {"trans_b", tb}}, dialects);
            ASSERT_EQ(out.size(), 1u);
            auto want = dt == torch::kBFloat16 ? torch::matmul(x.to(torch::kFloat32), y.to(torch::kFloat32)).to(dt)
                                               : torch::matmul(x, y);
            expectClose(out[0], want, tol,
                        std::string(c10::toString(dt)) + (dialects.empty() ? "" : " reference") + " gemm " +
                            shapeStr(Shape(a.begin(), a.end())) + (ta ? "^T" : "") + " @ " +
                            shapeStr(Shape(b.begin(), b.end())) + (tb ? "^T" : ""));
          }
}

TEST_F(KernelsLinalg, LinearBF16WithBiasAndReluEpilogue) {
  auto x = torch::randn({2, 40, 96}).to(torch::kBFloat16), w = torch::randn({72, 96}).to(torch::kBFloat16);
  auto b = torch::randn({72}).to(torch::kBFloat16);
  auto plain = runOp("linear", {x, w});
  ASSERT_EQ(plain.size(), 1u);
  expectClose(plain[0], torch::linear(x, w), kBf16Tol, "bf16 linear");
  auto biased = runOp("linear", {x, w, b});
  ASSERT_EQ(biased.size(), 1u);
  expectClose(biased[0], torch::linear(x, w, b), kBf16Tol, "bf16 linear + bias");
  auto relu = runOp("linear", {x, w, b}, {{"activation", std::string("relu")}});
  ASSERT_EQ(relu.size(), 1u);
  expectClose(relu[0], torch::relu(torch::linear(x, w, b)), kBf16Tol, "bf16 linear + bias + relu");
}

TEST_F(KernelsLinalg, LinearWithBias2D) {
  auto x = torch::randn({12, 20}), w = torch::randn({7, 20}), b = torch::randn({7});
  auto out = runOp("linear", {x, w, b});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::linear(x, w, b), 1e-5);
}
TEST_F(KernelsLinalg, Linear3DInputWithoutBias) {
  auto x = torch::randn({3, 5, 20}), w = torch::randn({11, 20});
  auto out = runOp("linear", {x, w});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::linear(x, w), 1e-5);
}
TEST_F(KernelsLinalg, Linear3DInputWithBias) {
  auto x = torch::randn({2, 6, 32}), w = torch::randn({16, 32}), b = torch::randn({16});
  auto out = runOp("linear", {x, w, b});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::linear(x, w, b), 1e-5);
}
TEST_F(KernelsLinalg, Linear1DInput) {
  auto x = torch::randn({9}), w = torch::randn({4, 9}), b = torch::randn({4});
  auto out = runOp("linear", {x, w, b});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::linear(x, w, b), 1e-5);
}
// An empty inner dimension is an empty sum: zeros, or the bias rows. The
// kernels write them (an executor's arena slot holds old data; the tests'
// KILN_POISON_ALLOC fills it with NaN), as the CUDA kernel tests found.
TEST_F(KernelsLinalg, EmptyInnerDimensionWritesZerosOrBias) {
  checkMatmul({4, 0}, {0, 5});
  checkMatmul({3, 2, 0}, {0, 4});
  auto x = torch::randn({3, 0}), w = torch::randn({5, 0}), b = torch::randn({5});
  for (const std::string act : {"", "relu"}) {
    auto plain = runOp("linear", {x, w}, act.empty() ? AttrMap{} : AttrMap{{"activation", act}});
    auto biased = runOp("linear", {x, w, b}, act.empty() ? AttrMap{} : AttrMap{{"activation", act}});
    ASSERT_EQ(plain.size(), 1u);
    ASSERT_EQ(biased.size(), 1u);
    auto want = torch::linear(x, w, b);
    expectClose(plain[0], torch::zeros({3, 5}), 0, "linear K = 0 " + act);
    expectClose(biased[0], act.empty() ? want : torch::relu(want), 0, "linear K = 0 with bias " + act);
  }
}

TEST_F(KernelsLinalg, LinearF64) {
  auto x = torch::randn({4, 6, 10}, torch::kFloat64), w = torch::randn({3, 10}, torch::kFloat64);
  auto b = torch::randn({3}, torch::kFloat64);
  auto out = runOp("linear", {x, w, b});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::linear(x, w, b), 1e-12);
}

// F32 goes to SGEMM; amp's half GEMMs to SGEMM through f32 (the _lowp
// kernel); only what BLAS cannot index (int dimensions) falls back to the
// reference loop.
TEST_F(KernelsLinalg, BlasKernelPreferredForF32AndHalfReferenceForHugeDims) {
  Graph g;
  Value* a = g.addInput("a", {DType::F32, {2, 3}}, ValueRole::Data);
  Value* b = g.addInput("b", {DType::F32, {3, 4}}, ValueRole::Data);
  Value* ah = g.addInput("ah", {DType::F16, {2, 3}}, ValueRole::Data);
  Value* bh = g.addInput("bh", {DType::F16, {3, 4}}, ValueRole::Data);
  const int64_t huge = int64_t{1} << 31;
  Value* ax = g.addInput("ax", {DType::F32, {2, huge}}, ValueRole::Data);
  Value* bx = g.addInput("bx", {DType::F32, {huge, 4}}, ValueRole::Data);
  Node* f32 = g.create("matmul", {a, b});
  Node* f16 = g.create("matmul", {ah, bh});
  Node* big = g.create("matmul", {ax, bx});
  EXPECT_EQ(KernelRegistry::cpu().select(*f32)->name, "blas.matmul");
  EXPECT_EQ(KernelRegistry::cpu().select(*f16)->name, "blas.matmul_lowp");
  EXPECT_EQ(KernelRegistry::cpu().select(*big)->name, "cpu.matmul");
  const AttrMap ta = {{"trans_a", int64_t{1}}};
  EXPECT_EQ(KernelRegistry::cpu().select(*g.create("gemm", {b, b}, {{"trans_b", int64_t{1}}}))->name, "blas.gemm");
  EXPECT_EQ(KernelRegistry::cpu().select(*g.create("gemm", {bh, bh}, ta))->name, "blas.gemm_lowp");
  EXPECT_EQ(KernelRegistry::cpu().select(*g.create("gemm", {bx, bx}, ta))->name, "cpu.gemm");
}

// amp's bf16 GEMMs run in oneDNN on the bf16 data wherever oneDNN has a
// bf16 matmul (every AVX-512 CPU; natively with AVX512_BF16 or AMX).
TEST_F(KernelsLinalg, Bf16GemmsRunInOneDnn) {
  Graph g;
  Value* a = g.addInput("a", {DType::BF16, {64, 32}}, ValueRole::Data);
  Value* w = g.addInput("w", {DType::BF16, {16, 32}}, ValueRole::Data);
  Value* q = g.addInput("q", {DType::BF16, {2, 4, 8, 32}}, ValueRole::Data);
  Value* k = g.addInput("k", {DType::BF16, {2, 4, 32, 8}}, ValueRole::Data);
  Node* lin = g.create("linear", {a, w});
  Node* mm = g.create("matmul", {q, k});
  // A weight gradient g^T x as fold_transposes writes it: a read transposed.
  Node* wgrad = g.create("gemm", {a, a}, {{"trans_a", int64_t{1}}});
  if (!cpu::cpuHasAvx512()) GTEST_SKIP() << "no AVX-512: oneDNN 2.x has no bf16 matmul here";
  EXPECT_EQ(KernelRegistry::cpu().select(*lin)->name, "onednn.linear_bf16");
  EXPECT_EQ(KernelRegistry::cpu().select(*mm)->name, "onednn.matmul_bf16");
  EXPECT_EQ(KernelRegistry::cpu().select(*wgrad)->name, "onednn.gemm_bf16");
}

}  // namespace
}  // namespace kiln::testing
