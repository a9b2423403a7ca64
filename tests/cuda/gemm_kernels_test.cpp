// CUDA GEMM kernels (backend/cuda/kernels_gemm.cpp: cublaslt, cublas) against
// the CPU reference: matmul over 1-D, 2-D, batched and broadcast operands,
// gemm with every pair of transpose flags (plain, batched, broadcast),
// linear with and without bias and relu, f32 (full fp32: 1e-5), f64, and
// f16/bf16 (fp32 accumulation: 1e-2). Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

std::string matmulIr(const std::string& dt, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                     const std::vector<int64_t>& out) {
  return "graph g(%a: " + ty(dt, a) + " data, %b: " + ty(dt, b) + " data) {\n  %0 = matmul(%a, %b) : " + ty(dt, out) +
         "\n  return %0 \"out\"\n}\n";
}

/// gemm(a, b) {trans_a, trans_b}: a is [.., m, k] or [.., k, m], b [.., k, p] or [.., p, k].
std::string gemmIr(const std::string& dt, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                   const std::vector<int64_t>& out, int ta, int tb) {
  return "graph g(%a: " + ty(dt, a) + " data, %b: " + ty(dt, b) + " data) {\n  %0 = gemm(%a, %b) {trans_a=" +
         std::to_string(ta) + ", trans_b=" + std::to_string(tb) + "} : " + ty(dt, out) +
         "\n  return %0 \"out\"\n}\n";
}

/// Operand shape [batch.., rows, cols], stored transposed when `t`.
std::vector<int64_t> stored(std::vector<int64_t> batch, int64_t rows, int64_t cols, int t) {
  batch.push_back(t ? cols : rows);
  batch.push_back(t ? rows : cols);
  return batch;
}

std::string linearIr(const std::string& dt, const std::vector<int64_t>& x, int64_t out_features, bool bias,
                     const std::string& activation = "none") {
  const int64_t in_features = x.back();
  std::vector<int64_t> y = x;
  y.back() = out_features;
  std::string s = "graph g(%x: " + ty(dt, x) + " data, %w: " + ty(dt, {out_features, in_features}) + " data";
  if (bias) s += ", %b: " + ty(dt, {out_features}) + " data";
  s += ") {\n  %0 = linear(%x, %w" + std::string(bias ? ", %b" : "") + ")";
  if (activation != "none") s += " {activation=\"" + activation + "\"}";
  return s + " : " + ty(dt, y) + "\n  return %0 \"out\"\n}\n";
}

CheckOptions tolerance(const std::string& dt) {
  CheckOptions o;
  o.tol = dt == "f16" || dt == "bf16" ? 1e-2 : dt == "f64" ? 1e-12 : 1e-5;
  return o;
}

/// f32 and the low-precision dtypes have both dialects; f64 only cuBLAS.
int expectedKernels(const std::string& dt) {
  return dt == "f64" ? 1 : 2;
}

TEST(CudaGemmKernels, MatmulMatrices) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f32", "f64"}) {
    SCOPED_TRACE(dt);
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {64, 128}, {128, 32}, {64, 32}), tolerance(dt)), expectedKernels(dt));
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {96, 768}, {768, 64}, {96, 64}), tolerance(dt)), expectedKernels(dt));
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {33, 17}, {17, 5}, {33, 5}), tolerance(dt)), expectedKernels(dt));
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {1, 300}, {300, 1}, {1, 1}), tolerance(dt)), expectedKernels(dt));
  }
}

TEST(CudaGemmKernels, MatmulVectors) {
  KILN_REQUIRE_GPU();
  const CheckOptions o = tolerance("f32");
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {128}, {128, 32}, {32}), o), 2);  // vector @ matrix
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {64, 128}, {128}, {64}), o), 2);  // matrix @ vector
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {128}, {128}, {}), o), 2);        // dot product
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {3, 16}, {5, 16, 8}, {5, 3, 8}), o), 2);
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {16}, {5, 16, 8}, {5, 8}), o), 2);  // vector @ batch
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {5, 3, 16}, {16}, {5, 3}), o), 2);  // batch @ vector
}

TEST(CudaGemmKernels, MatmulBatched) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f32", "f64"}) {
    SCOPED_TRACE(dt);
    const CheckOptions o = tolerance(dt);
    // Attention-shaped strided batches.
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {12, 64, 128}, {12, 128, 64}, {12, 64, 64}), o), expectedKernels(dt));
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {2, 12, 16, 64}, {2, 12, 64, 16}, {2, 12, 16, 16}), o),
              expectedKernels(dt));
    // A plain matrix B under a batched A: folded into M.
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {4, 10, 32}, {32, 24}, {4, 10, 24}), o), expectedKernels(dt));
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {4, 10, 32}, {1, 32, 24}, {4, 10, 24}), o), expectedKernels(dt));
    // A plain matrix A under a batched B: batch stride 0 for A.
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {10, 32}, {6, 32, 24}, {6, 10, 24}), o), expectedKernels(dt));
  }
}

TEST(CudaGemmKernels, MatmulBroadcastBatches) {
  KILN_REQUIRE_GPU();
  const CheckOptions o = tolerance("f32");
  // Broadcast on both sides: one strided launch per outer batch entry.
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {4, 1, 8, 16}, {1, 3, 16, 8}, {4, 3, 8, 8}), o), 2);
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {2, 3, 8, 16}, {3, 16, 4}, {2, 3, 8, 4}), o), 2);
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {2, 1, 8, 16}, {2, 5, 16, 4}, {2, 5, 8, 4}), o), 2);
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {3, 1, 2, 8, 16}, {4, 1, 16, 4}, {3, 4, 2, 8, 4}), o), 2);
}

TEST(CudaGemmKernels, MatmulEmpty) {
  KILN_REQUIRE_GPU();
  const CheckOptions o = tolerance("f32");
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {4, 0}, {0, 5}, {4, 5}), o), 2);  // K = 0: zeros
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {0, 8}, {8, 5}, {0, 5}), o), 2);  // nothing to write
  EXPECT_EQ(expectMatchesCpu(matmulIr("f32", {3, 0, 4, 8}, {8, 2}, {3, 0, 4, 2}), o), 2);
}

TEST(CudaGemmKernels, Linear) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f32", "f64"}) {
    SCOPED_TRACE(dt);
    const CheckOptions o = tolerance(dt);
    for (bool bias : {false, true}) {
      SCOPED_TRACE(bias ? "bias" : "no bias");
      EXPECT_EQ(expectMatchesCpu(linearIr(dt, {32, 96}, 48, bias), o), expectedKernels(dt));
      EXPECT_EQ(expectMatchesCpu(linearIr(dt, {4, 16, 96}, 48, bias), o), expectedKernels(dt));
      EXPECT_EQ(expectMatchesCpu(linearIr(dt, {32, 768}, 256, bias), o), expectedKernels(dt));
      EXPECT_EQ(expectMatchesCpu(linearIr(dt, {96}, 7, bias), o), expectedKernels(dt));
      // The fuse pass's relu epilogue.
      EXPECT_EQ(expectMatchesCpu(linearIr(dt, {2, 8, 64}, 40, bias, "relu"), o), expectedKernels(dt));
    }
  }
}

TEST(CudaGemmKernels, LinearEmptyInner) {
  KILN_REQUIRE_GPU();
  const CheckOptions o = tolerance("f32");
  EXPECT_EQ(expectMatchesCpu(linearIr("f32", {3, 0}, 5, false), o), 2);  // zeros
  EXPECT_EQ(expectMatchesCpu(linearIr("f32", {3, 0}, 5, true), o), 2);   // the bias in every row
  EXPECT_EQ(expectMatchesCpu(linearIr("f32", {3, 0}, 5, false, "relu"), o), 2);
  EXPECT_EQ(expectMatchesCpu(linearIr("f32", {3, 0}, 5, true, "relu"), o), 1);  // cublas only
}

TEST(CudaGemmKernels, LowPrecision) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f16", "bf16"}) {
    SCOPED_TRACE(dt);
    const CheckOptions o = tolerance(dt);
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {64, 256}, {256, 48}, {64, 48}), o), 2);
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {12, 64, 128}, {12, 128, 64}, {12, 64, 64}), o), 2);
    EXPECT_EQ(expectMatchesCpu(matmulIr(dt, {4, 1, 8, 16}, {1, 3, 16, 8}, {4, 3, 8, 8}), o), 2);
    EXPECT_EQ(expectMatchesCpu(linearIr(dt, {4, 16, 96}, 48, true), o), 2);
    EXPECT_EQ(expectMatchesCpu(linearIr(dt, {32, 768}, 256, false), o), 2);
    // relu in the epilogue: cublaslt only (the cuBLAS path's relu is f32/f64).
    EXPECT_EQ(expectMatchesCpu(linearIr(dt, {2, 8, 64}, 40, true, "relu"), o), 1);
  }
}

TEST(CudaGemmKernels, GemmTransposeFlags) {
  KILN_REQUIRE_GPU();
  struct Case {
    std::vector<int64_t> batch_a, batch_b, batch_out;
    int64_t m, k, p;
  };
  const std::vector<Case> cases = {
      {{}, {}, {}, 64, 128, 32},                 // plain matrices
      {{}, {}, {}, 33, 17, 5},                   // odd sizes
      {{12}, {12}, {12}, 64, 48, 40},            // strided batch
      {{2, 3}, {2, 3}, {2, 3}, 16, 64, 16},      // attention-shaped
      {{4, 1}, {1, 3}, {4, 3}, 8, 16, 8},        // broadcast on both sides
      {{4}, {}, {4}, 10, 32, 24},                // a plain B under a batched A (no M fold when A is transposed)
      {{}, {6}, {6}, 10, 32, 24},                // a plain A under a batched B
  };
  for (const std::string dt : {"f32", "f64", "bf16"})
    for (int ta : {0, 1})
      for (int tb : {0, 1})
        for (const Case& c : cases) {
          SCOPED_TRACE(dt + " trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb) + " m=" +
                       std::to_string(c.m) + " k=" + std::to_string(c.k) + " p=" + std::to_string(c.p) +
                       " batch " + std::to_string(c.batch_out.size()));
          std::vector<int64_t> out = c.batch_out;
          out.push_back(c.m);
          out.push_back(c.p);
          EXPECT_EQ(expectMatchesCpu(gemmIr(dt, stored(c.batch_a, c.m, c.k, ta), stored(c.batch_b, c.k, c.p, tb),
                                            out, ta, tb),
                                     tolerance(dt)),
                    expectedKernels(dt));
        }
}

TEST(CudaGemmKernels, DialectsByPriority) {
  // Selection prefers cuBLASLt where it applies; f64 falls to cuBLAS. Needs no GPU.
  auto g = parseGraph(matmulIr("f32", {8, 8}, {8, 8}, {8, 8}), "test");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const CudaKernelDef* k = CudaKernelRegistry::get().select(*g->nodes().front());
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->name, "cublaslt.matmul");
  EXPECT_EQ(k->workspace(*g->nodes().front()), size_t{32} << 20);
  auto gt = parseGraph(gemmIr("bf16", {8, 4}, {6, 8}, {4, 6}, 1, 1), "test");
  ASSERT_TRUE(gt.ok()) << gt.error().message;
  k = CudaKernelRegistry::get().select(*gt->nodes().front());
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->name, "cublaslt.gemm");
  auto g64 = parseGraph(linearIr("f64", {8, 8}, 4, true), "test");
  ASSERT_TRUE(g64.ok()) << g64.error().message;
  k = CudaKernelRegistry::get().select(*g64->nodes().front());
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->name, "cublas.linear");
}

}  // namespace
}  // namespace kiln::cuda::test
