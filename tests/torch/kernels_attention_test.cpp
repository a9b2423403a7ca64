// The fused attention kernels (core/ops/attention.h) against libtorch's
// autograd through matmul -> scale -> mask -> softmax -> matmul on the same
// tensors: y, lse and the three gradients, in f64 (exact up to summation
// order), f32 and bf16 (within their rounding), for every mask kind,
// broadcast masks, causal with L != S, E != Ev, both layouts, blocks of
// rows that do not divide L, and fully masked rows (NaN, as torch).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

struct Case {
  std::vector<int64_t> batch;  // dims before L (the last one is the heads)
  int64_t L, S, E, Ev;
  std::string mask = "none";  // none / keep / drop / add
  std::vector<int64_t> mask_shape;  // broadcast to batch + [L, S]
  bool causal = false;
  bool tokens_outer = false;
  torch::ScalarType dtype = torch::kFloat64;
  double scale = 0.3;
};

/// [*, H, T, W] logical -> physical storage for the layout.
torch::Tensor physical(const torch::Tensor& logical, bool tokens_outer) {
  return tokens_outer ? logical.transpose(-3, -2).contiguous() : logical.contiguous();
}

struct Reference {
  torch::Tensor y, lse, gq, gk, gv;
};

Reference reference(const Case& c, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& mask, const torch::Tensor& gy) {
  // Computed in f64 from the (possibly bf16-rounded) inputs.
  auto ql = q.to(torch::kFloat64).detach().requires_grad_(true);
  auto kl = k.to(torch::kFloat64).detach().requires_grad_(true);
  auto vl = v.to(torch::kFloat64).detach().requires_grad_(true);
  auto s = torch::matmul(ql, kl.transpose(-2, -1)) * c.scale;
  const double ninf = -std::numeric_limits<double>::infinity();
  if (c.mask == "keep") s = s.masked_fill(mask.logical_not(), ninf);
  if (c.mask == "drop") s = s.masked_fill(mask, ninf);
  if (c.mask == "add") s = s + mask.to(torch::kFloat64);
  if (c.causal) s = s.masked_fill(torch::ones({c.L, c.S}, torch::kBool).triu(1), ninf);
  auto y = torch::matmul(torch::softmax(s, -1), vl);
  y.backward(gy.to(torch::kFloat64));
  return {y.detach(), torch::logsumexp(s, -1).detach(), ql.grad(), kl.grad(), vl.grad()};
}

void runCase(const Case& c, double tol) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto shape = [&](int64_t rows, int64_t w) {
    std::vector<int64_t> s = c.batch;
    s.push_back(rows);
    s.push_back(w);
    return s;
  };
  auto q = torch::randn(shape(c.L, c.E), opts).to(c.dtype);
  auto k = torch::randn(shape(c.S, c.E), opts).to(c.dtype);
  auto v = torch::randn(shape(c.S, c.Ev), opts).to(c.dtype);
  auto gy = torch::randn(shape(c.L, c.Ev), opts).to(c.dtype);
  torch::Tensor mask;
  if (c.mask == "add") mask = torch::randn(c.mask_shape, opts).to(c.dtype);
  if (c.mask == "keep" || c.mask == "drop") mask = torch::rand(c.mask_shape, opts) < 0.7;
  if (c.mask == "drop") mask = mask.logical_not();
  const Reference ref = reference(c, q, k, v, mask, gy);

  AttrMap attrs = {{"scale", c.scale},
                   {"causal", int64_t{c.causal}},
                   {"mask", c.mask},
                   {"tokens_outer", int64_t{c.tokens_outer}}};
  std::vector<torch::Tensor> ins = {physical(q, c.tokens_outer), physical(k, c.tokens_outer),
                                    physical(v, c.tokens_outer)};
  if (mask.defined()) ins.push_back(mask);
  auto fwd = runOp("attention", ins, attrs);
  ASSERT_EQ(fwd.size(), 2u);
  auto logical = [&](const torch::Tensor& t) { return c.tokens_outer ? t.transpose(-3, -2) : t; };
  expectClose(logical(fwd[0]).to(torch::kFloat64), ref.y, tol, "y");
  expectClose(fwd[1].to(torch::kFloat64), ref.lse, tol, "lse");

  std::vector<torch::Tensor> bins = {physical(gy, c.tokens_outer), ins[0], ins[1], ins[2], fwd[0], fwd[1]};
  if (mask.defined()) bins.push_back(mask);
  auto bwd = runOp("attention_backward", bins, attrs);
  ASSERT_EQ(bwd.size(), 3u);
  expectClose(logical(bwd[0]).to(torch::kFloat64), ref.gq, tol, "gq");
  expectClose(logical(bwd[1]).to(torch::kFloat64), ref.gk, tol, "gk");
  expectClose(logical(bwd[2]).to(torch::kFloat64), ref.gv, tol, "gv");
}

class KernelsAttention : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(7); }
};

TEST_F(KernelsAttention, PlainF64) { runCase({{2, 3}, 9, 11, 8, 5}, 1e-12); }

TEST_F(KernelsAttention, RankThreeAndOneHead) { runCase({{4}, 6, 6, 16, 16}, 1e-12); }

TEST_F(KernelsAttention, CausalSquareAndRectangular) {
  Case c{{2, 2}, 13, 13, 8, 8};
  c.causal = true;
  runCase(c, 1e-12);
  c.S = 20;  // keys beyond L: top-left aligned as torch's is_causal
  runCase(c, 1e-12);
}

TEST_F(KernelsAttention, KeepDropAndAdditiveMasksBroadcast) {
  Case c{{2, 3}, 7, 10, 4, 6};
  c.mask = "keep";
  c.mask_shape = {2, 1, 7, 10};  // a padding mask per batch, shared by the heads
  runCase(c, 1e-12);
  c.mask = "drop";
  c.mask_shape = {7, 10};
  runCase(c, 1e-12);
  c.mask = "add";
  c.mask_shape = {1, 3, 1, 10};
  runCase(c, 1e-12);
}

TEST_F(KernelsAttention, TokensOuterLayout) {
  Case c{{2, 4}, 12, 12, 8, 8};
  c.tokens_outer = true;
  c.causal = true;
  runCase(c, 1e-12);
  c.batch = {3};  // rank 3: [T, N, E] storage (nn.MultiheadAttention's)
  c.causal = false;
  runCase(c, 1e-12);
}

TEST_F(KernelsAttention, ManyBlocksOfRows) {
  // 32768 / 700 = 46 rows per block: L = 300 is 7 blocks, the last partial.
  Case c{{1, 2}, 300, 700, 8, 4};
  c.causal = true;
  runCase(c, 1e-11);
}

TEST_F(KernelsAttention, F32AndBF16) {
  Case c{{2, 4}, 64, 64, 32, 32};
  c.dtype = torch::kFloat32;
  c.causal = true;
  runCase(c, 2e-5);
  c.tokens_outer = true;
  c.dtype = torch::kBFloat16;  // bf16 in and out, f32 inside
  runCase(c, 2e-2);
}

/// The cases above in one list, for the f32 and bf16 runs: on AVX-512
/// CPUs those take the packed tiles (kernels_attention_packed.cpp), with
/// their own packing of k, v, q and gy, odd widths (bf16's half pairs),
/// causal cuts and masks; elsewhere the BLAS tiles.
std::vector<Case> everyShape() {
  std::vector<Case> cases = {{{2, 3}, 9, 11, 8, 5}, {{4}, 6, 6, 16, 16}, {{2, 2}, 13, 13, 7, 9}};
  Case c{{2, 2}, 13, 20, 8, 8};
  c.causal = true;
  cases.push_back(c);
  c = Case{{2, 3}, 7, 10, 5, 6};
  c.mask = "keep";
  c.mask_shape = {2, 1, 7, 10};
  cases.push_back(c);
  c.mask = "drop";
  c.mask_shape = {7, 10};
  cases.push_back(c);
  c.mask = "add";
  c.mask_shape = {1, 3, 1, 10};
  cases.push_back(c);
  c = Case{{2, 4}, 12, 12, 8, 8};
  c.tokens_outer = true;
  c.causal = true;
  cases.push_back(c);
  c = Case{{1, 2}, 300, 700, 64, 64};  // 46 rows per block, the last block partial
  c.causal = true;
  cases.push_back(c);
  c = Case{{2, 3}, 197, 197, 64, 64};  // a ViT-B/16 head's shape
  c.tokens_outer = true;
  cases.push_back(c);
  return cases;
}

/// Every case of everyShape() in `dtype` within `tol`.
void runEveryShape(torch::ScalarType dtype, double tol) {
  for (Case c : everyShape()) {
    c.dtype = dtype;
    SCOPED_TRACE("L " + std::to_string(c.L) + " S " + std::to_string(c.S) + " E " + std::to_string(c.E) + " mask " +
                 c.mask);
    runCase(c, tol);
  }
}

TEST_F(KernelsAttention, EveryShapeInF32) { runEveryShape(torch::kFloat32, 2e-5); }

TEST_F(KernelsAttention, EveryShapeInBF16) {
  // bf16 q, k, v, gy, y and gradients; p and the score gradients rounded to
  // bf16 before their GEMMs (as autocast's bf16 matmuls): within 8e-3 of
  // the f64 answer on the same bf16 inputs, relative to the largest.
  runEveryShape(torch::kBFloat16, 8e-3);
}

TEST_F(KernelsAttention, FullyMaskedRowIsNaNAsTorch) {
  auto q = torch::randn({1, 2, 4}, torch::kFloat64), k = torch::randn({1, 3, 4}, torch::kFloat64);
  auto v = torch::randn({1, 3, 4}, torch::kFloat64);
  auto keep = torch::ones({2, 3}, torch::kBool);
  keep[1].fill_(false);
  auto out = runOp("attention", {q, k, v, keep}, {{"scale", 1.0}, {"mask", std::string("keep")}});
  ASSERT_EQ(out.size(), 2u);
  auto s = torch::matmul(q, k.transpose(-2, -1)).masked_fill(keep.logical_not(), -INFINITY);
  auto ref = torch::matmul(torch::softmax(s, -1), v);
  EXPECT_TRUE(torch::isnan(ref[0][1]).all().item<bool>());
  EXPECT_TRUE(torch::isnan(out[0][0][1]).all().item<bool>());
  expectClose(out[0][0][0], ref[0][0], 1e-12);
}

}  // namespace
}  // namespace kiln::testing
