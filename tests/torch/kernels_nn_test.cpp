// CPU nn kernels against libtorch on seeded random inputs: conv2d (oneDNN
// and im2col paths, every attribute), pooling (ceil_mode, padding,
// count_include_pad, divisor_override, adaptive windows), batch/layer/group
// norm (batch_norm train with both running-stat outputs), embedding,
// dropout's mask and reproducibility, softmax/log_softmax. Also times a
// ResNet-sized convolution against torch::conv2d (printed, not asserted).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "backend/cpu/cpu_features.h"
#include "backend/kernel.h"
#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

class KernelsNN : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(42); }
};

/// A one-node graph over data inputs input0.. (kept alive with its node).
struct OneNode {
  Graph g;
  Node* node = nullptr;
  TensorMap bound;
  std::vector<Tensor> ins;
  OneNode(const std::string& op, const std::vector<torch::Tensor>& inputs, const AttrMap& attrs) {
    std::vector<Value*> vals;
    for (size_t i = 0; i < inputs.size(); ++i) {
      ins.push_back(fromTorch(inputs[i]));
      std::string name = "input" + std::to_string(i);
      vals.push_back(g.addInput(name, ins.back().type(), ValueRole::Data));
      bound[name] = ins.back();
    }
    node = g.create(op, vals, attrs);
    for (size_t i = 0; i < node->numOutputs(); ++i) g.addOutput(node->output(i), "output" + std::to_string(i));
  }
};

/// Run one specific kernel (by name) on a one-node graph, bypassing selection.
std::vector<torch::Tensor> runKernel(const std::string& kernel, const std::string& op,
                                     const std::vector<torch::Tensor>& inputs, const AttrMap& attrs = {}) {
  OneNode one(op, inputs, attrs);
  for (const KernelDef* k : KernelRegistry::cpu().candidates(op)) {
    if (k->name != kernel) continue;
    std::vector<Tensor> outs(one.node->numOutputs());
    KernelContext ctx;
    k->fn(*one.node, one.ins, outs, ctx);
    std::vector<torch::Tensor> result;
    for (const Tensor& t : outs) result.push_back(toTorch(t));
    return result;
  }
  ADD_FAILURE() << "no kernel " << kernel;
  return {};
}

/// Run on the executor with a given seed; returns the error message on failure.
Result<std::vector<Tensor>> runSeeded(const std::string& op, const std::vector<torch::Tensor>& inputs,
                                      const AttrMap& attrs, uint64_t seed) {
  OneNode one(op, inputs, attrs);
  auto ex = CpuExecutor::create(one.g, {seed, 0});
  if (!ex.ok()) return ex.error();
  return ex->run(one.bound);
}

// ---- conv2d -------------------------------------------------------------------

struct ConvCase {
  Ints x, w;
  Ints stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

void checkConv(const ConvCase& c, torch::ScalarType dt = torch::kFloat32) {
  auto x = torch::randn(c.x, dt), w = torch::randn(c.w, dt), b = torch::randn({c.w[0]}, dt);
  std::vector<torch::Tensor> ins = {x, w};
  if (c.bias) ins.push_back(b);
  AttrMap attrs = {{"stride", c.stride}, {"padding", c.padding}, {"dilation", c.dilation}, {"groups", c.groups}};
  // bf16: libtorch's convolution of the same values in f32, rounded once
  // (what Kiln computes; libtorch's own bf16 convolution accumulates in bf16
  // on CPUs without bf16 instructions).
  const bool bf16 = dt == torch::kBFloat16;
  auto f = [&](const torch::Tensor& t) { return bf16 ? t.to(torch::kFloat32) : t; };
  auto expected = torch::conv2d(f(x), f(w), c.bias ? f(b) : torch::Tensor(), c.stride, c.padding, c.dilation, c.groups)
                      .to(dt);
  std::vector<std::string> kernels = {"blas.conv2d"};
  // oneDNN: f32, and bf16 where it has kernels for it (AVX-512; on AVX2 it refuses and blas runs it).
  if (dt == torch::kFloat32 || (bf16 && cpu::cpuHasAvx512())) kernels.push_back("onednn.conv2d");
  // bf16: both sides accumulate in f32 and round once, in different orders.
  const double tol = dt == torch::kFloat64 ? 1e-12 : dt == torch::kBFloat16 ? 1e-2 : 1e-5;
  for (const std::string& k : kernels) {
    auto out = runKernel(k, "conv2d", ins, attrs);
    ASSERT_EQ(out.size(), 1u) << k;
    expectClose(out[0], expected, tol, k);
  }
  auto out = runOp("conv2d", ins, attrs);  // through selection and the executor
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], expected, tol, "selected kernel");
}

/// conv2d's two backward ops in bf16 against libtorch's autograd on the same
/// bf16 values in f32, rounded once (Kiln accumulates in f32): the input and
/// weight gradients of sum(conv(x, w) * g).
void checkConvBackwardBf16(const ConvCase& c) {
  auto x = torch::randn(c.x).to(torch::kBFloat16), w = torch::randn(c.w).to(torch::kBFloat16);
  auto xf = x.to(torch::kFloat32).requires_grad_(), wf = w.to(torch::kFloat32).requires_grad_();
  auto y = torch::conv2d(xf, wf, {}, c.stride, c.padding, c.dilation, c.groups);
  auto g = torch::randn(y.sizes()).to(torch::kBFloat16);
  y.backward(g.to(torch::kFloat32));
  AttrMap attrs = {{"stride", c.stride}, {"padding", c.padding}, {"dilation", c.dilation}, {"groups", c.groups}};
  AttrMap in_attrs = attrs, w_attrs = attrs;
  in_attrs["input_shape"] = c.x;
  w_attrs["weight_shape"] = c.w;
  auto dx = runOp("conv2d_input_backward", {g, w}, in_attrs);
  auto dw = runOp("conv2d_weight_backward", {g, x}, w_attrs);
  ASSERT_EQ(dx.size(), 1u);
  ASSERT_EQ(dw.size(), 1u);
  // The weight gradient sums over batch and pixels: a few more roundings.
  expectClose(dx[0], xf.grad().to(torch::kBFloat16), 1e-2, "bf16 input gradient");
  expectClose(dw[0], wf.grad().to(torch::kBFloat16), 2e-2, "bf16 weight gradient");
  OneNode in_node("conv2d_input_backward", {g, w}, in_attrs);
  if (cpu::cpuHasAvx512()) EXPECT_EQ(KernelRegistry::cpu().select(*in_node.node)->name, "onednn.conv2d_input_backward");
}

/// conv2d and its backward ops with channels_last=1 (NHWC activations,
/// OIHW weights; passes/channels_last.cpp) against libtorch's NCHW
/// convolution and autograd on the same values: forward (with the bias),
/// input gradient and weight gradient, in f32 and bf16 (the reference: the
/// same bf16 values in f32, rounded once, as Kiln accumulates; the
/// gradients' sums round more, hence the looser bounds).
void checkConvChannelsLast(const ConvCase& c, torch::ScalarType dt) {
  auto xv = torch::randn(c.x).to(dt), wv = torch::randn(c.w).to(dt);
  auto b = torch::randn({c.w[0]}).to(dt);
  auto x = xv.to(torch::kFloat32).detach().requires_grad_(), w = wv.to(torch::kFloat32).detach().requires_grad_();
  auto yf = torch::conv2d(x, w, c.bias ? b.to(torch::kFloat32) : torch::Tensor(), c.stride, c.padding, c.dilation,
                          c.groups);
  auto g = torch::randn(yf.sizes()).to(dt);
  yf.backward(g.to(torch::kFloat32));
  auto y = yf.detach().to(dt);
  auto nhwc = [](const torch::Tensor& t) { return t.detach().permute({0, 2, 3, 1}).contiguous(); };
  auto nchw = [](const torch::Tensor& t) { return t.permute({0, 3, 1, 2}); };
  AttrMap attrs = {{"stride", c.stride},
                   {"padding", c.padding},
                   {"dilation", c.dilation},
                   {"groups", c.groups},
                   {"channels_last", int64_t{1}}};
  std::vector<torch::Tensor> ins = {nhwc(xv), wv};
  if (c.bias) ins.push_back(b);
  AttrMap in_attrs = attrs, w_attrs = attrs;
  in_attrs["input_shape"] = Ints{c.x[0], c.x[2], c.x[3], c.x[1]};
  w_attrs["weight_shape"] = c.w;
  const bool bf16 = dt == torch::kBFloat16;
  // Each of the three results against libtorch's, however they were run.
  using Runner =
      std::function<std::vector<torch::Tensor>(const std::string&, const std::vector<torch::Tensor>&, const AttrMap&)>;
  auto check = [&](const Runner& run, const std::string& how) {
    auto out = run("conv2d", ins, attrs);
    auto dx = run("conv2d_input_backward", {nhwc(g), wv}, in_attrs);
    auto dw = run("conv2d_weight_backward", {nhwc(g), nhwc(xv)}, w_attrs);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(dx.size(), 1u);
    ASSERT_EQ(dw.size(), 1u);
    expectClose(nchw(out[0]), y, bf16 ? 1e-2 : 1e-5, how + " forward");
    expectClose(nchw(dx[0]), x.grad().to(dt), bf16 ? 1e-2 : 1e-5, how + " input gradient");
    expectClose(dw[0], w.grad().to(dt), bf16 ? 2e-2 : 1e-5, how + " weight gradient");
  };
  check([](const std::string& op, const std::vector<torch::Tensor>& in, const AttrMap& a) { return runOp(op, in, a); },
        "selected");
  // oneDNN runs them by default (bf16 where it has kernels for it: AVX-512);
  // the reference loops (on transposed copies) agree too.
  const bool no_dnnl_bf16 = bf16 && !cpu::cpuHasAvx512();
  OneNode fwd("conv2d", ins, attrs);
  EXPECT_EQ(KernelRegistry::cpu().select(*fwd.node)->name, no_dnnl_bf16 ? "blas.conv2d" : "onednn.conv2d");
  OneNode wgrad("conv2d_weight_backward", {nhwc(g), nhwc(xv)}, w_attrs);
  // And an ungrouped f32 1x1 without AVX-512: a plain GEMM, faster on OpenBLAS there (kernels_conv_grad.cpp).
  const bool gemm = no_dnnl_bf16 || (c.w[2] == 1 && c.w[3] == 1 && c.groups == 1 && !bf16 && !cpu::cpuHasAvx512());
  EXPECT_EQ(KernelRegistry::cpu().select(*wgrad.node)->name,
            gemm ? "blas.conv2d_weight_backward" : "onednn.conv2d_weight_backward");
  check([](const std::string& op, const std::vector<torch::Tensor>& in,
           const AttrMap& a) { return runKernel("blas." + op, op, in, a); },
        "blas");
}

TEST_F(KernelsNN, ConvChannelsLast) {
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(dt == torch::kFloat32 ? "f32" : "bf16");
    checkConvChannelsLast({{2, 8, 12, 12}, {16, 8, 3, 3}, {1, 1}, {1, 1}}, dt);
    checkConvChannelsLast({{2, 32, 7, 7}, {24, 32, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, false}, dt);
    checkConvChannelsLast({{2, 3, 17, 15}, {5, 3, 3, 5}, {2, 1}, {1, 2}, {2, 1}, 1, false}, dt);
    checkConvChannelsLast({{2, 16, 14, 14}, {16, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 16}, dt);
  }
  // MobileNet-v2's late blocks in f32: stride-1 1x1 expansions (plain GEMMs on OpenBLAS
  // without AVX-512) and wide depthwise convolutions on 2x2 and 4x4 maps.
  checkConvChannelsLast({{2, 160, 2, 2}, {960, 160, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false}, torch::kFloat32);
  checkConvChannelsLast({{2, 24, 5, 7}, {40, 24, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false}, torch::kFloat32);
  checkConvChannelsLast({{2, 960, 2, 2}, {960, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 960, false}, torch::kFloat32);
  checkConvChannelsLast({{2, 576, 4, 4}, {576, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 576, false}, torch::kFloat32);
}

TEST_F(KernelsNN, Conv3x3Padded) {
  checkConv({{2, 8, 12, 12}, {16, 8, 3, 3}, {1, 1}, {1, 1}});
}
TEST_F(KernelsNN, ConvStridePaddingDilationNonSquareNoBias) {
  checkConv({{2, 3, 17, 15}, {5, 3, 3, 5}, {2, 1}, {1, 2}, {2, 1}, 1, false});
}
TEST_F(KernelsNN, ConvGroups) {
  checkConv({{1, 8, 9, 9}, {12, 4, 3, 3}, {1, 2}, {1, 1}, {1, 1}, 2});
}
TEST_F(KernelsNN, ConvDepthwise) {
  checkConv({{2, 16, 14, 14}, {16, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 16});
  checkConv({{1, 6, 10, 10}, {12, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 6, false});  // channel multiplier 2
}
TEST_F(KernelsNN, Conv1x1) {
  checkConv({{2, 32, 7, 7}, {24, 32, 1, 1}});
  checkConv({{1, 16, 8, 8}, {8, 16, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, false});
}
TEST_F(KernelsNN, ConvStemLike) {
  checkConv({{1, 3, 32, 32}, {8, 3, 7, 7}, {2, 2}, {3, 3}});
}
TEST_F(KernelsNN, ConvF64) {
  checkConv({{2, 4, 9, 8}, {6, 2, 3, 2}, {1, 2}, {1, 0}, {2, 1}, 2}, torch::kFloat64);
}

TEST_F(KernelsNN, ConvBF16) {
  checkConv({{2, 8, 12, 12}, {16, 8, 3, 3}, {1, 1}, {1, 1}}, torch::kBFloat16);
  checkConv({{2, 32, 7, 7}, {24, 32, 1, 1}}, torch::kBFloat16);
  checkConv({{2, 16, 14, 14}, {16, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 16}, torch::kBFloat16);
  checkConv({{1, 3, 32, 32}, {8, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}, 1, false}, torch::kBFloat16);
}
TEST_F(KernelsNN, ConvBackwardBF16) {
  checkConvBackwardBf16({{2, 8, 12, 12}, {16, 8, 3, 3}, {1, 1}, {1, 1}});
  checkConvBackwardBf16({{2, 32, 7, 7}, {24, 32, 1, 1}});
  checkConvBackwardBf16({{2, 16, 14, 14}, {32, 16, 1, 1}, {2, 2}});
  checkConvBackwardBf16({{2, 8, 9, 9}, {8, 2, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 4});
}

TEST_F(KernelsNN, HalfTypesComputeInFloat) {
  // f16/bf16 inputs are widened to f32, computed, and rounded back once.
  auto x = torch::randn({1, 4, 9, 9}).to(torch::kFloat16), w = torch::randn({6, 4, 3, 3}).to(torch::kFloat16);
  auto out = runOp("conv2d", {x, w}, {{"padding", Ints{1, 1}}});
  ASSERT_EQ(out.size(), 1u);
  auto expected = torch::conv2d(x.to(torch::kFloat32), w.to(torch::kFloat32), {}, 1, 1).to(torch::kFloat16);
  expectClose(out[0], expected, 1e-2, "f16 conv");
  auto xb = torch::randn({32, 32}).to(torch::kBFloat16);
  auto drop = runOp("dropout", {xb}, {{"p", 0.5}});
  ASSERT_EQ(drop.size(), 2u);
  ASSERT_EQ(drop[0].scalar_type(), torch::kBFloat16);
  ASSERT_EQ(drop[1].scalar_type(), torch::kBool);
  expectClose(drop[0], torch::where(drop[1], xb * 2, torch::zeros_like(xb)), 0, "bf16 dropout");
}

TEST_F(KernelsNN, ConvSelectsOneDnnForF32) {
  OneNode one("conv2d", {torch::randn({1, 4, 8, 8}), torch::randn({4, 4, 3, 3})}, {});
  EXPECT_EQ(KernelRegistry::cpu().select(*one.node)->name, "onednn.conv2d");
  OneNode d("conv2d", {torch::randn({1, 4, 8, 8}, torch::kFloat64), torch::randn({4, 4, 3, 3}, torch::kFloat64)}, {});
  EXPECT_EQ(KernelRegistry::cpu().select(*d.node)->name, "blas.conv2d");
}

/// Median milliseconds of `fn` over `reps` runs after a warm-up.
template <typename Fn>
double medianMs(int reps, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto s = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

TEST_F(KernelsNN, ConvResNetBlockTiming) {
  // layer1 of ResNet-18: 1x64x56x56, 3x3, 64 -> 64, padding 1.
  auto x = torch::randn({1, 64, 56, 56}), w = torch::randn({64, 64, 3, 3});
  AttrMap attrs = {{"padding", Ints{1, 1}}};
  const int torch_threads = torch::get_num_threads();
  for (int threads : {1, 2}) {
    OneNode one("conv2d", {x, w}, attrs);
    auto ex = CpuExecutor::create(one.g, {0, threads});
    ASSERT_TRUE(ex.ok());
    Result<std::vector<Tensor>> last = Error{"not run"};
    double kiln_ms = medianMs(20, [&] { last = ex->run(one.bound); });
    ASSERT_TRUE(last.ok()) << last.error().message;
    double blas_ms = medianMs(5, [&] { runKernel("blas.conv2d", "conv2d", {x, w}, attrs); });
    torch::set_num_threads(threads);
    torch::Tensor ref;
    double torch_ms = medianMs(20, [&] { ref = torch::conv2d(x, w, {}, Ints{1, 1}, Ints{1, 1}); });
    expectClose(toTorch((*last)[0]), ref, 1e-5);
    std::printf(
        "[ timing ] conv 1x64x56x56 3x3 64->64, %d thread(s): kiln %s %.2f ms, im2col+sgemm %.2f ms, "
        "torch %.2f ms\n",
        threads, ex->kernelChoices()[0].kernel.c_str(), kiln_ms, blas_ms, torch_ms);
  }
  torch::set_num_threads(torch_threads);
}

// ---- pooling ------------------------------------------------------------------------

void checkMaxPool(const Ints& shape, Ints k, Ints s, Ints p, Ints d, bool ceil) {
  auto x = torch::randn(shape);
  auto out = runOp("max_pool2d", {x},
                   {{"kernel_size", k}, {"stride", s}, {"padding", p}, {"dilation", d}, {"ceil_mode", int64_t{ceil}}});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::max_pool2d(x, k, s, p, d, ceil), 0, "max_pool2d");
}

TEST_F(KernelsNN, MaxPoolStemAndCeilMode) {
  checkMaxPool({2, 3, 16, 16}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false);
  checkMaxPool({2, 3, 15, 15}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
  checkMaxPool({1, 2, 10, 7}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true);
  checkMaxPool({1, 2, 11, 11}, {3, 2}, {2, 3}, {1, 1}, {1, 1}, true);
}
// amp's bf16 activations are pooled as bf16: a maximum rounds nothing, so
// the result equals torch's bit for bit, NaN included.
TEST_F(KernelsNN, MaxPoolBF16IsExact) {
  auto x = torch::randn({2, 8, 15, 15}).to(torch::kBFloat16);
  x.index_put_({0, 1, 3, 4}, std::numeric_limits<float>::quiet_NaN());
  AttrMap attrs = {{"kernel_size", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}};
  auto out = runOp("max_pool2d", {x}, attrs);
  ASSERT_EQ(out.size(), 1u);
  auto expected = torch::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  ASSERT_EQ(out[0].scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(torch::isnan(out[0]), torch::isnan(expected)));
  EXPECT_TRUE(torch::equal(torch::nan_to_num(out[0]), torch::nan_to_num(expected)));
  OneNode one("max_pool2d", {x}, attrs);
  EXPECT_EQ(KernelRegistry::cpu().select(*one.node)->name, "cpu.max_pool2d_bf16");
}

// amp's bf16 max-pool backward reads bf16 directly and sums each input's
// gradients in f32: libtorch's f32 gradient of the same values, rounded
// once. Small integers make ties common (the first maximum in the window
// takes the gradient) and overlapping windows add into one input; a NaN
// takes its windows' gradients. Every geometry runs, ceil_mode and
// dilation included.
TEST_F(KernelsNN, MaxPoolBackwardBF16MatchesTorchF32RoundedOnce) {
  struct Geometry {
    Ints k, s, p, d;
    bool ceil;
  };
  for (const Geometry& geo :
       {Geometry{{3, 3}, {2, 2}, {1, 1}, {1, 1}, false}, Geometry{{3, 3}, {1, 1}, {1, 1}, {1, 1}, false},
        Geometry{{2, 3}, {2, 1}, {1, 0}, {1, 2}, true}, Geometry{{3, 2}, {2, 3}, {1, 1}, {1, 1}, true}}) {
    auto x = torch::randint(-3, 4, {2, 5, 13, 11}).to(torch::kBFloat16);
    x.index_put_({1, 2, 4, 5}, std::numeric_limits<float>::quiet_NaN());
    auto x32 = x.to(torch::kFloat).requires_grad_();
    auto y32 = torch::max_pool2d(x32, geo.k, geo.s, geo.p, geo.d, geo.ceil);
    auto g = torch::randn(y32.sizes()).to(torch::kBFloat16);
    y32.backward(g.to(torch::kFloat));
    AttrMap attrs = {{"kernel_size", geo.k},
                     {"stride", geo.s},
                     {"padding", geo.p},
                     {"dilation", geo.d},
                     {"ceil_mode", int64_t{geo.ceil}}};
    auto out = runOp("max_pool2d_backward", {g, x}, attrs);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(out[0], x32.grad().to(torch::kBFloat16)))
        << "kernel " << geo.k[0] << "x" << geo.k[1] << " stride " << geo.s[0] << "x" << geo.s[1];
    OneNode one("max_pool2d_backward", {g, x}, attrs);
    EXPECT_EQ(KernelRegistry::cpu().select(*one.node)->name, "cpu.max_pool2d_backward_bf16");
  }
}

TEST_F(KernelsNN, MaxPoolDilationAnd3DInput) {
  checkMaxPool({2, 4, 13, 12}, {3, 3}, {1, 2}, {1, 0}, {2, 2}, false);
  checkMaxPool({3, 9, 9}, {2, 2}, {2, 2}, {1, 1}, {1, 1}, true);
}
TEST_F(KernelsNN, MaxPoolDefaultStrideAndNaN) {
  auto x = torch::randn({1, 1, 4, 4});
  x[0][0][1][1] = std::numeric_limits<float>::quiet_NaN();
  auto out = runOp("max_pool2d", {x}, {{"kernel_size", Ints{2}}});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::max_pool2d(x, {2, 2}), 0, "NaN propagates");
}

void checkAvgPool(const Ints& shape, Ints k, Ints s, Ints p, bool ceil, bool include_pad, int64_t divisor) {
  auto x = torch::randn(shape);
  auto out = runOp("avg_pool2d", {x},
                   {{"kernel_size", k},
                    {"stride", s},
                    {"padding", p},
                    {"ceil_mode", int64_t{ceil}},
                    {"count_include_pad", int64_t{include_pad}},
                    {"divisor_override", divisor}});
  ASSERT_EQ(out.size(), 1u);
  auto expected =
      torch::avg_pool2d(x, k, s, p, ceil, include_pad, divisor ? c10::optional<int64_t>(divisor) : c10::nullopt);
  expectClose(out[0], expected, 1e-5,
              "avg_pool2d ceil=" + std::to_string(ceil) + " include_pad=" + std::to_string(include_pad) +
                  " divisor=" + std::to_string(divisor));
}

TEST_F(KernelsNN, AvgPoolPaddingCeilModeCountIncludePad) {
  for (bool ceil : {false, true})
    for (bool include : {false, true}) {
      checkAvgPool({2, 3, 10, 9}, {3, 3}, {2, 2}, {1, 1}, ceil, include, 0);
      checkAvgPool({1, 2, 7, 8}, {3, 2}, {2, 3}, {1, 1}, ceil, include, 0);
      checkAvgPool({1, 2, 6, 6}, {4, 4}, {3, 3}, {2, 1}, ceil, include, 0);
    }
}
TEST_F(KernelsNN, AvgPoolDivisorOverride) {
  checkAvgPool({2, 3, 10, 9}, {3, 3}, {2, 2}, {1, 1}, true, false, 5);
  checkAvgPool({1, 4, 8, 8}, {2, 2}, {2, 2}, {0, 0}, false, true, 3);
}
TEST_F(KernelsNN, AvgPoolDefaultStride3D) {
  auto x = torch::randn({3, 8, 8});
  auto out = runOp("avg_pool2d", {x}, {{"kernel_size", Ints{2, 2}}});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::avg_pool2d(x, {2, 2}), 1e-6);
}

void checkAdaptive(const Ints& shape, Ints size) {
  auto x = torch::randn(shape);
  auto avg = runOp("adaptive_avg_pool2d", {x}, {{"output_size", size}});
  auto mx = runOp("adaptive_max_pool2d", {x}, {{"output_size", size}});
  ASSERT_EQ(avg.size(), 1u);
  ASSERT_EQ(mx.size(), 1u);
  expectClose(avg[0], torch::adaptive_avg_pool2d(x, size), 1e-6, "adaptive avg");
  expectClose(mx[0], std::get<0>(torch::adaptive_max_pool2d(x, size)), 0, "adaptive max");
}

TEST_F(KernelsNN, AdaptivePoolsNonDivisible) {
  checkAdaptive({2, 3, 7, 7}, {3, 3});
  checkAdaptive({1, 4, 5, 5}, {2, 3});
  checkAdaptive({2, 8, 7, 7}, {1, 1});
  checkAdaptive({3, 10, 6}, {4, 4});
  checkAdaptive({1, 2, 3, 3}, {5, 4});  // output larger than input: overlapping windows
}

// ---- normalization ---------------------------------------------------------------------

TEST_F(KernelsNN, BatchNormEval) {
  auto x = torch::randn({4, 6, 5, 5}), w = torch::randn({6}), b = torch::randn({6});
  auto rm = torch::randn({6}), rv = torch::rand({6}) + 0.5;
  auto out = runOp("batch_norm", {x, w, b, rm, rv}, {{"training", int64_t{0}}, {"eps", 1e-3}});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::batch_norm(x, w, b, rm, rv, false, 0.1, 1e-3, false), 1e-5);
}

void checkBatchNormTrain(const Ints& shape, double momentum, torch::ScalarType dt) {
  int64_t c = shape[1];
  auto x = torch::randn(shape, dt) * 3 + 1, w = torch::randn({c}, dt), b = torch::randn({c}, dt);
  auto rm = torch::randn({c}, dt), rv = torch::rand({c}, dt) + 0.5;
  auto out = runOp("batch_norm", {x, w, b, rm, rv}, {{"training", int64_t{1}}, {"momentum", momentum}});
  ASSERT_EQ(out.size(), 3u);
  // torch updates running_mean/var in place.
  auto rm_t = rm.clone(), rv_t = rv.clone();
  auto y = torch::batch_norm(x, w, b, rm_t, rv_t, true, momentum, 1e-5, false);
  double tol = dt == torch::kFloat64 ? 1e-10 : 1e-5;
  expectClose(out[0], y, tol, "y");
  expectClose(out[1], rm_t, tol, "running_mean");
  expectClose(out[2], rv_t, tol, "running_var");
}

TEST_F(KernelsNN, BatchNormTrainUpdatesRunningStats) {
  checkBatchNormTrain({8, 5, 6, 7}, 0.1, torch::kFloat32);
  checkBatchNormTrain({16, 12}, 0.3, torch::kFloat32);  // [N, C] as in BatchNorm1d
  checkBatchNormTrain({3, 4, 5, 5}, 0.1, torch::kFloat64);
  // [N, C] over many row blocks (batch_norm_rows.cpp sums blocks of rows in parallel).
  checkBatchNormTrain({5000, 24}, 0.1, torch::kFloat32);
  checkBatchNormTrain({3001, 7, 1}, 0.1, torch::kFloat64);
}

// The [N, C] backward over many row blocks, training and eval, against
// libtorch's autograd (grad_kernels_test covers small shapes in f64 too).
TEST_F(KernelsNN, BatchNormRowsBackwardMatchesAutograd) {
  for (bool training : {true, false}) {
    const int64_t c = 24;
    auto x = torch::randn({5000, c}) * 2 + 0.5, w = torch::randn({c}), b = torch::randn({c});
    auto rm = torch::randn({c}), rv = torch::rand({c}) + 0.5;
    auto xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_(), bg = b.clone().requires_grad_();
    auto y = torch::batch_norm(xg, wg, bg, rm.clone(), rv.clone(), training, 0.1, 1e-5, false);
    auto g = torch::randn(y.sizes());
    y.backward(g);
    std::vector<torch::Tensor> args = {g, x, w};
    if (!training) args.insert(args.end(), {rm, rv});
    auto grads = runOp("batch_norm_backward", args, {{"training", int64_t{training}}, {"eps", 1e-5}});
    ASSERT_EQ(grads.size(), 3u);
    expectClose(grads[0], xg.grad(), 1e-5, "grad_x");
    expectClose(grads[1], wg.grad(), 1e-5, "grad_weight");
    expectClose(grads[2], bg.grad(), 1e-5, "grad_bias");
  }
}

// amp's bf16 batch norm (x bf16, parameters and statistics f32), as torch's
// CPU autocast runs it: forward in training and eval mode, and the backward
// (grad_x bf16, parameter gradients f32) against libtorch's autograd.
// NCHW and [N, C] (batch_norm_rows.cpp's loops, over several row blocks).
TEST_F(KernelsNN, BatchNormBF16WithF32Params) {
  for (const Ints& shape : {Ints{4, 6, 5, 7}, Ints{7000, 6}}) {
    SCOPED_TRACE("shape [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ", ...]");
    const int64_t c = 6;
    auto x = (torch::randn(shape) * 3 + 1).to(torch::kBFloat16), w = torch::randn({c}), b = torch::randn({c});
    auto rm = torch::randn({c}), rv = torch::rand({c}) + 0.5;
    auto out = runOp("batch_norm", {x, w, b, rm, rv}, {{"training", int64_t{1}}, {"momentum", 0.1}});
    ASSERT_EQ(out.size(), 3u);
    auto rm_t = rm.clone(), rv_t = rv.clone();
    auto y = torch::batch_norm(x, w, b, rm_t, rv_t, true, 0.1, 1e-5, false);
    ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
    expectClose(out[0], y, 1e-2, "bf16 y");
    expectClose(out[1], rm_t, 1e-5, "f32 running_mean");
    expectClose(out[2], rv_t, 1e-5, "f32 running_var");
    auto eval = runOp("batch_norm", {x, w, b, rm, rv}, {{"training", int64_t{0}}});
    ASSERT_EQ(eval.size(), 1u);
    expectClose(eval[0], torch::batch_norm(x, w, b, rm, rv, false, 0.1, 1e-5, false), 1e-2, "bf16 eval y");
    OneNode one("batch_norm", {x, w, b, rm, rv}, {{"training", int64_t{1}}});
    EXPECT_EQ(KernelRegistry::cpu().select(*one.node)->name, "cpu.batch_norm_bf16");

    // Backward: d/dx, d/dw, d/db of sum(bn(x) * g).
    auto xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_(), bg = b.clone().requires_grad_();
    auto yg = torch::batch_norm(xg, wg, bg, rm.clone(), rv.clone(), true, 0.1, 1e-5, false);
    auto g = torch::randn(yg.sizes()).to(torch::kBFloat16);
    yg.backward(g);
    auto grads = runOp("batch_norm_backward", {g, x, w}, {{"training", int64_t{1}}, {"eps", 1e-5}});
    ASSERT_EQ(grads.size(), 3u);
    expectClose(grads[0], xg.grad(), 2e-2, "bf16 grad_x");
    expectClose(grads[1], wg.grad(), 1e-2, "f32 grad_weight");
    expectClose(grads[2], bg.grad(), 1e-2, "f32 grad_bias");
    OneNode back("batch_norm_backward", {g, x, w}, {{"training", int64_t{1}}, {"eps", 1e-5}});
    EXPECT_EQ(KernelRegistry::cpu().select(*back.node)->name, "cpu.batch_norm_backward_bf16");
  }
}

TEST_F(KernelsNN, LayerNorm) {
  auto x = torch::randn({3, 7, 16}) * 2 + 0.5;
  auto w1 = torch::randn({16}), b1 = torch::randn({16});
  auto out = runOp("layer_norm", {x, w1, b1}, {{"normalized_shape", Ints{16}}});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::layer_norm(x, {16}, w1, b1), 1e-5, "last dim");
  auto w2 = torch::randn({7, 16}), b2 = torch::randn({7, 16});
  out = runOp("layer_norm", {x, w2, b2}, {{"normalized_shape", Ints{7, 16}}, {"eps", 1e-3}});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::layer_norm(x, {7, 16}, w2, b2, 1e-3), 1e-5, "last two dims");
}

TEST_F(KernelsNN, GroupNorm) {
  auto x = torch::randn({2, 8, 5, 4}) * 2 - 1, w = torch::randn({8}), b = torch::randn({8});
  for (int64_t g : {1, 4, 8}) {
    auto out = runOp("group_norm", {x, w, b}, {{"num_groups", g}});
    ASSERT_EQ(out.size(), 1u);
    expectClose(out[0], torch::group_norm(x, g, w, b), 1e-5, "groups=" + std::to_string(g));
  }
  auto xd = torch::randn({3, 6, 10}, torch::kFloat64);
  auto wd = torch::randn({6}, torch::kFloat64), bd = torch::randn({6}, torch::kFloat64);
  auto out = runOp("group_norm", {xd, wd, bd}, {{"num_groups", int64_t{3}}, {"eps", 1e-4}});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::group_norm(xd, 3, wd, bd, 1e-4), 1e-10, "f64");
}

// channels_last=1 (passes/channels_last.cpp): x, g and grad_x are [N, H, W, C].
// Shapes with several row blocks (backend/cpu/batch_norm_rows.cpp) and a
// mean far from zero.
TEST_F(KernelsNN, GroupNormChannelsLastMatchesTorch) {
  auto nhwc = [](const torch::Tensor& t) { return t.detach().permute({0, 2, 3, 1}).contiguous(); };
  auto nchw = [](const torch::Tensor& t) { return t.permute({0, 3, 1, 2}); };
  struct Case {
    std::vector<int64_t> x;
    int64_t groups;
    torch::ScalarType dt;
  };
  for (const Case& c : {Case{{2, 64, 40, 36}, 32, torch::kFloat32}, Case{{3, 12, 5, 7}, 4, torch::kFloat32},
                        Case{{2, 8, 6, 6}, 1, torch::kFloat32}, Case{{2, 16, 9, 9}, 16, torch::kFloat32},
                        Case{{2, 24, 10, 10}, 6, torch::kFloat64}}) {
    const std::string what = shapeStr(Shape(c.x.begin(), c.x.end())) + " groups=" + std::to_string(c.groups);
    auto x = (torch::randn(c.x, c.dt) * 2 + 3).requires_grad_();
    auto w = torch::randn({c.x[1]}, c.dt).requires_grad_(), b = torch::randn({c.x[1]}, c.dt).requires_grad_();
    auto y = torch::group_norm(x, c.groups, w, b, 1e-5);
    auto g = torch::randn(y.sizes(), c.dt);
    y.backward(g);
    const AttrMap a = {{"num_groups", c.groups}, {"channels_last", int64_t{1}}};
    const double tol = c.dt == torch::kFloat64 ? 1e-10 : 1e-5;
    auto out = runOp("group_norm", {nhwc(x), w.detach(), b.detach()}, a);
    ASSERT_EQ(out.size(), 1u);
    expectClose(nchw(out[0]), y, tol, what + " forward");
    auto grads = runOp("group_norm_backward", {nhwc(g), nhwc(x), w.detach()}, a);
    ASSERT_EQ(grads.size(), 3u);
    expectClose(nchw(grads[0]), x.grad(), tol, what + " grad_x");
    expectClose(grads[1], w.grad(), tol, what + " grad_weight");
    expectClose(grads[2], b.grad(), tol, what + " grad_bias");
  }
}

// ---- embedding --------------------------------------------------------------------------

TEST_F(KernelsNN, Embedding) {
  auto w = torch::randn({10, 6});
  auto idx = torch::randint(0, 10, {3, 4}, torch::kInt64);
  auto out = runOp("embedding", {w, idx}, {{"padding_idx", int64_t{0}}});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::embedding(w, idx, 0), 0, "i64 indices");
  auto idx32 = idx.to(torch::kInt32);
  out = runOp("embedding", {w, idx32});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::embedding(w, idx), 0, "i32 indices");
}

// The weight gradient against torch::embedding_backward: duplicates
// accumulate, padding_idx's row stays zero, scale_grad_by_freq divides each
// row by its count in the batch (padding occurrences counted, as PyTorch does).
TEST_F(KernelsNN, EmbeddingBackwardPaddingAndScaleByFrequency) {
  auto idx = torch::tensor(std::vector<int64_t>{1, 4, 1, 0, 4, 4, 2, 1, 7, 4, 0, 2}).view({3, 4});
  for (auto dtype : {torch::kFloat32, torch::kFloat64})
    for (int64_t pad : {int64_t{-1}, int64_t{4}})
      for (bool by_freq : {false, true}) {
        auto g = torch::randn({3, 4, 5}, dtype);
        auto out = runOp("embedding_backward", {g, idx},
                         {{"num_weights", int64_t{9}}, {"padding_idx", pad}, {"scale_grad_by_freq", int64_t{by_freq}}});
        ASSERT_EQ(out.size(), 1u);
        auto expect = torch::embedding_backward(g, idx, 9, pad, by_freq, /*sparse=*/false);
        expectClose(out[0], expect, dtype == torch::kFloat64 ? 1e-15 : 1e-6,
                    "padding_idx " + std::to_string(pad) + (by_freq ? ", scale_grad_by_freq" : ""));
      }
}

TEST_F(KernelsNN, EmbeddingIndexOutOfRangeFails) {
  auto w = torch::randn({5, 3});
  for (int64_t bad : {5, -1}) {
    auto r = runSeeded("embedding", {w, torch::tensor(std::vector<int64_t>{1, bad, 2})}, {}, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("index " + std::to_string(bad) + " at position 1 is out of range"),
              std::string::npos)
        << r.error().message;
  }
}

// ---- dropout ----------------------------------------------------------------------------------

TEST_F(KernelsNN, DropoutMaskScaleAndFraction) {
  auto x = torch::randn({256, 512});
  const double p = 0.3;
  auto out = runOp("dropout", {x}, {{"p", p}, {"training", int64_t{1}}});
  ASSERT_EQ(out.size(), 2u);
  auto y = out[0], mask = out[1];
  ASSERT_EQ(mask.scalar_type(), torch::kBool);
  double kept = mask.to(torch::kFloat64).mean().item<double>();
  EXPECT_NEAR(kept, 1 - p, 0.01);
  expectClose(y, torch::where(mask, x / (1 - p), torch::zeros_like(x)), 1e-6, "kept values scaled");
}

TEST_F(KernelsNN, DropoutReproducibleBySeed) {
  auto x = torch::randn({64, 64});
  AttrMap attrs = {{"p", 0.5}};
  auto a = runSeeded("dropout", {x}, attrs, 7), b = runSeeded("dropout", {x}, attrs, 7);
  auto c = runSeeded("dropout", {x}, attrs, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(torch::equal(toTorch((*a)[1]), toTorch((*b)[1])));
  EXPECT_FALSE(torch::equal(toTorch((*a)[1]), toTorch((*c)[1])));
}

TEST_F(KernelsNN, DropoutEdgeProbabilitiesAndEval) {
  auto x = torch::randn({8, 9});
  auto keep_all = runOp("dropout", {x}, {{"p", 0.0}});
  ASSERT_EQ(keep_all.size(), 2u);
  expectClose(keep_all[0], x, 0, "p=0");
  EXPECT_TRUE(keep_all[1].all().item<bool>());
  auto drop_all = runOp("dropout", {x}, {{"p", 1.0}});
  ASSERT_EQ(drop_all.size(), 2u);
  expectClose(drop_all[0], torch::zeros_like(x), 0, "p=1");
  EXPECT_FALSE(drop_all[1].any().item<bool>());
  auto eval = runOp("dropout", {x}, {{"p", 0.5}, {"training", int64_t{0}}});
  ASSERT_EQ(eval.size(), 1u);
  expectClose(eval[0], x, 0, "eval");
}

// ---- softmax --------------------------------------------------------------------------------------

TEST_F(KernelsNN, SoftmaxAndLogSoftmaxEveryDim) {
  auto x = torch::randn({3, 5, 7}) * 4;
  for (int64_t d : {0, 1, 2, -1}) {
    auto s = runOp("softmax", {x}, {{"dim", d}});
    auto l = runOp("log_softmax", {x}, {{"dim", d}});
    ASSERT_EQ(s.size(), 1u);
    ASSERT_EQ(l.size(), 1u);
    expectClose(s[0], torch::softmax(x, d), 1e-6, "softmax dim " + std::to_string(d));
    expectClose(l[0], torch::log_softmax(x, d), 1e-5, "log_softmax dim " + std::to_string(d));
  }
}

TEST_F(KernelsNN, SoftmaxLargeLogitsStableAndF64) {
  auto x = torch::randn({4, 10}) * 1000;
  auto s = runOp("softmax", {x}, {{"dim", int64_t{1}}});
  auto l = runOp("log_softmax", {x}, {{"dim", int64_t{1}}});
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(l.size(), 1u);
  expectClose(s[0], torch::softmax(x, 1), 1e-6, "softmax");
  expectClose(l[0], torch::log_softmax(x, 1), 1e-5, "log_softmax");
  auto xd = torch::randn({6, 4, 3}, torch::kFloat64);
  auto ld = runOp("log_softmax", {xd}, {{"dim", int64_t{1}}});
  ASSERT_EQ(ld.size(), 1u);
  expectClose(ld[0], torch::log_softmax(xd, 1), 1e-12, "f64");
}

}  // namespace
}  // namespace kiln::testing
