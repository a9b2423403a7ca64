// Gradient rules of conv2d, the 2-D pools, embedding and dropout
// (core/ops/nn_grad.cpp) and their backward kernels.
//
// Finite differences in f64 check every attribute variant against the
// forward kernels. What finite differences cannot see is checked against
// values PyTorch 1.13 computed (x.grad for loss = sum(y * [1, 2, 3, ...])):
// argmax ties, all-negative windows next to padding, NaN, avg-pool divisors
// and padding_idx. The f32 oneDNN conv backward is compared with the f64
// reference on the same data.
#include <cmath>

#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/cpu_features.h"
#include "core/op_table.h"
#include "passes/autodiff.h"
#include "tests/passes/grad_check.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

// ---- helpers -------------------------------------------------------------------------

Tensor f64Tensor(Shape s, const std::vector<double>& v) {
  Tensor t(DType::F64, std::move(s));
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), v[i]);
  return t;
}

Tensor randomTensor(DType dt, Shape s, uint64_t seed) {
  Tensor t(dt, std::move(s));
  uint64_t z = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    t.set(i, static_cast<double>(z >> 11) * 0x1.0p-53 * 2 - 1);
  }
  return t;
}

/// d/dx of sum(op(x) * [1, 2, 3, ...]) through the autodiff pass (f64).
Tensor gradOfRamp(const std::string& op, const AttrMap& attrs, const Tensor& x) {
  Graph g;
  Value* in = g.addInput("x", x.type(), ValueRole::Param);
  Value* y = g.add(op, {in}, attrs);
  Tensor ramp(y->type());
  for (int64_t i = 0; i < ramp.numel(); ++i) ramp.set(i, static_cast<double>(i + 1));
  Value* w = g.addInput("w", y->type(), ValueRole::Data);
  Value* loss = g.add("sum", {g.add("mul", {y, w})});
  auto grads = differentiate(g, loss, {in});
  EXPECT_TRUE(grads.ok()) << grads.error().message;
  g.addOutput((*grads)[0], "dx", OutputRole::Gradient);
  auto ex = CpuExecutor::create(g);
  EXPECT_TRUE(ex.ok()) << ex.error().message;
  auto out = ex->run({{"x", x}, {"w", ramp}});
  EXPECT_TRUE(out.ok()) << out.error().message;
  return (*out)[0];
}

void expectValues(const Tensor& t, const std::vector<double>& expect, const std::string& what) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expect.size())) << what;
  for (size_t i = 0; i < expect.size(); ++i)
    EXPECT_NEAR(t.at(static_cast<int64_t>(i)), expect[i], 1e-12) << what << " element " << i;
}

/// Runs one node on the CPU executor; returns its output and the kernel used.
std::pair<Tensor, std::string> runNode(const std::string& op, const std::vector<Tensor>& inputs, const AttrMap& attrs) {
  Graph g;
  std::vector<Value*> ins;
  TensorMap bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    ins.push_back(g.addInput(name, inputs[i].type(), ValueRole::Data));
    bound[name] = inputs[i];
  }
  g.addOutput(g.add(op, ins, attrs), "out");
  auto ex = CpuExecutor::create(g);
  if (!ex.ok()) {
    ADD_FAILURE() << ex.error().message;
    return {};
  }
  auto out = ex->run(bound);
  if (!out.ok()) {
    ADD_FAILURE() << out.error().message;
    return {};
  }
  return {(*out)[0], ex->kernelChoices().back().kernel};
}

/// Runs the kernel named `kernel` directly on a node built from `inputs`.
Tensor runKernel(const std::string& op, const std::string& kernel, const std::vector<Tensor>& inputs,
                 const AttrMap& attrs) {
  Graph g;
  std::vector<Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(g.addInput("in" + std::to_string(i), inputs[i].type(), ValueRole::Data));
  Node* n = g.create(op, ins, attrs);
  for (const KernelDef* k : KernelRegistry::cpu().candidates(op))
    if (k->name == kernel) {
      std::vector<Tensor> outs(1);
      KernelContext ctx;
      k->fn(*n, inputs, outs, ctx);
      return outs[0];
    }
  ADD_FAILURE() << "no kernel " << kernel;
  return {};
}

/// max|a - b| / max|b|.
double relError(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double err = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    err = std::max(err, std::abs(a.at(i) - b.at(i)));
    scale = std::max(scale, std::abs(b.at(i)));
  }
  return err / std::max(scale, 1e-30);
}

// ---- conv2d ----------------------------------------------------------------------------

TEST(GradNN, Conv2dBasicWithBias) {
  EXPECT_TRUE(checkGrad({.op = "conv2d", .inputs = {f64({1, 2, 5, 5}), f64({3, 2, 3, 3}), f64({3})}}));
}

TEST(GradNN, Conv2dStridePaddingDilation) {
  EXPECT_TRUE(checkGrad({.op = "conv2d",
                         .attrs = {{"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}},
                         .inputs = {f64({1, 2, 5, 5}), f64({2, 2, 3, 3})}}));
  EXPECT_TRUE(checkGrad({.op = "conv2d",
                         .attrs = {{"dilation", Ints{2, 2}}, {"padding", Ints{2, 1}}},
                         .inputs = {f64({1, 1, 5, 5}), f64({2, 1, 3, 3}), f64({2})}}));
  // Asymmetric stride/padding, a 2x3 kernel, and an input row that no window
  // reads (floor-rounded output): its gradient is zero.
  EXPECT_TRUE(checkGrad({.op = "conv2d",
                         .attrs = {{"stride", Ints{2, 1}}, {"padding", Ints{0, 1}}},
                         .inputs = {f64({1, 2, 6, 4}), f64({2, 2, 2, 3})}}));
}

TEST(GradNN, Conv2dGroupsAndDepthwise) {
  EXPECT_TRUE(checkGrad(
      {.op = "conv2d", .attrs = {{"groups", int64_t{2}}}, .inputs = {f64({1, 4, 4, 4}), f64({4, 2, 3, 3}), f64({4})}}));
  // Depthwise with a channel multiplier of 2, stride 2, padding 1.
  EXPECT_TRUE(checkGrad({.op = "conv2d",
                         .attrs = {{"groups", int64_t{3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}},
                         .inputs = {f64({1, 3, 5, 5}), f64({6, 1, 3, 3}), f64({6})}}));
}

TEST(GradNN, Conv2dPointwiseBatch) {
  // 1x1, stride 1, no padding: the GEMM path without im2col; batch of 2.
  EXPECT_TRUE(checkGrad({.op = "conv2d", .inputs = {f64({2, 3, 3, 3}), f64({2, 3, 1, 1}), f64({2})}}));
}

TEST(GradNN, Conv2dOnlyWeightNeeded) {
  // The input is data: only the weight and bias gradients are computed.
  EXPECT_TRUE(checkGrad({.op = "conv2d", .inputs = {f64({1, 2, 4, 4}), f64({2, 2, 3, 3}), f64({2})}, .no_grad = {0}}));
}

/// conv2d_input_backward as the forward of a transposed convolution
/// (conv_transpose2d lowers to it): its own gradients, conv2d for the input
/// and conv2d_weight_backward for the weight, against finite differences;
/// strided with the output_padding extra row, grouped, dilated.
TEST(GradNN, TransposedConvolutionThroughConvInputBackward) {
  EXPECT_TRUE(checkGrad({.op = "conv2d_input_backward",
                         .attrs = {{"input_shape", Ints{1, 3, 5, 5}}},
                         .inputs = {f64({1, 2, 3, 3}), f64({2, 3, 3, 3})}}));
  // stride 2, padding 1, output_padding 1: (3 - 1) * 2 - 2 + 3 + 1 = 6.
  EXPECT_TRUE(checkGrad({.op = "conv2d_input_backward",
                         .attrs = {{"input_shape", Ints{2, 2, 6, 6}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}},
                         .inputs = {f64({2, 3, 3, 3}), f64({3, 2, 3, 3})}}));
  EXPECT_TRUE(checkGrad({.op = "conv2d_input_backward",
                         .attrs = {{"input_shape", Ints{1, 4, 5, 7}},  // W: output_padding 1
                                   {"groups", int64_t{2}},
                                   {"dilation", Ints{2, 1}},
                                   {"stride", Ints{1, 2}}},
                         .inputs = {f64({1, 4, 3, 3}), f64({4, 2, 2, 2})}}));
}

/// The f32 fast path (oneDNN where it takes the config) against the f64
/// reference on the same data, for both backward ops; the f32 GEMM kernel too.
TEST(GradNN, Conv2dBackwardF32MatchesF64Reference) {
  struct Case {
    Shape x, w;
    Ints stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 8, 11, 11}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{2, 8, 12, 12}, {16, 8, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
      {{1, 8, 13, 13}, {8, 8, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 1},
      {{2, 8, 10, 10}, {12, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
      {{2, 8, 11, 11}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8},   // depthwise
      {{1, 8, 12, 9}, {16, 1, 5, 3}, {2, 1}, {2, 1}, {1, 2}, 8},   // depthwise x2, mixed
      {{2, 6, 10, 10}, {4, 6, 4, 4}, {3, 3}, {0, 0}, {1, 1}, 1},   // unread border
      {{2, 4, 10, 11}, {6, 4, 3, 3}, {2, 2}, {0, 1}, {1, 1}, 1},   // unread last row/col
      {{2, 8, 9, 9}, {8, 4, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 2},     // grouped strided 1x1
      {{2, 16, 7, 7}, {32, 16, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},  // pointwise
      {{2, 16, 8, 8}, {32, 16, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},  // strided pointwise
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    Shape y = {c.x[0], c.w[0], 0, 0};
    for (int d = 0; d < 2; ++d)
      y[2 + d] = (c.x[2 + d] + 2 * c.padding[d] - c.dilation[d] * (c.w[2 + d] - 1) - 1) / c.stride[d] + 1;
    Tensor x = randomTensor(DType::F64, c.x, seed++), w = randomTensor(DType::F64, c.w, seed++),
           g = randomTensor(DType::F64, y, seed++);
    AttrMap attrs = {{"stride", c.stride}, {"padding", c.padding}, {"dilation", c.dilation}, {"groups", c.groups}};
    std::string what = "x " + shapeStr(c.x) + " w " + shapeStr(c.w) + " groups " + std::to_string(c.groups);
    for (const char* op : {"conv2d_input_backward", "conv2d_weight_backward"}) {
      const bool wgrad = std::string(op) == "conv2d_weight_backward";
      AttrMap a = attrs;
      a[wgrad ? "weight_shape" : "input_shape"] = wgrad ? c.w : c.x;
      std::vector<Tensor> in64 = {g, wgrad ? x : w};
      std::vector<Tensor> in32 = {g.to(DType::F32), in64[1].to(DType::F32)};
      auto [ref, ref_kernel] = runNode(op, in64, a);
      EXPECT_EQ(ref_kernel, std::string("blas.") + op) << what;
      auto [fast, fast_kernel] = runNode(op, in32, a);
      // Ungrouped 1x1 convolutions run on the GEMM path where the CPU has
      // no AVX-512 (faster there), on oneDNN where it has.
      const bool pointwise = c.w[2] == 1 && c.w[3] == 1 && c.groups == 1;
      EXPECT_EQ(fast_kernel, std::string(pointwise && !cpu::cpuHasAvx512() ? "blas." : "onednn.") + op) << what;
      EXPECT_LT(relError(fast, ref), 1e-5) << op << " " << fast_kernel << " " << what;
      Tensor gemm32 = runKernel(op, std::string("blas.") + op, in32, a);
      EXPECT_LT(relError(gemm32, ref), 1e-5) << op << " blas f32 " << what;
    }
  }
}

TEST(GradNN, Conv2dBackwardOpsRejectBadShapes) {
  Graph g;
  Value* gy = g.addInput("g", f64({1, 3, 3, 3}), ValueRole::Data);
  Value* w = g.addInput("w", f64({3, 2, 3, 3}), ValueRole::Data);
  // A 5x5 input gives a 3x3 output; 6x6 would give 4x4.
  EXPECT_NO_THROW(g.create("conv2d_input_backward", {gy, w}, {{"input_shape", Ints{1, 2, 5, 5}}}));
  try {
    g.create("conv2d_input_backward", {gy, w}, {{"input_shape", Ints{1, 2, 6, 6}}});
    ADD_FAILURE() << "no error";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d_input_backward"), std::string::npos) << e.what();
  }
  EXPECT_THROW(g.create("conv2d_weight_backward", {gy, w}, {{"weight_shape", Ints{3, 2, 3, 3}}}), KilnException);
  EXPECT_THROW(g.create("conv2d_input_backward", {gy, w}, {{"input_shape", Ints{1, 2, 5}}}), KilnException);
  EXPECT_THROW(g.create("conv2d_input_backward", {gy, w}, {{"input_shape", Ints{1, 2, 5, 5}}, {"stride", Ints{0}}}),
               KilnException);
}

// ---- max pooling ----------------------------------------------------------------------

TEST(GradNN, MaxPool2dVariants) {
  EXPECT_TRUE(checkGrad({.op = "max_pool2d", .attrs = {{"kernel_size", Ints{2}}}, .inputs = {f64({1, 2, 4, 5})}}));
  EXPECT_TRUE(checkGrad({.op = "max_pool2d",
                         .attrs = {{"kernel_size", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}},
                         .inputs = {f64({2, 1, 5, 5})}}));
  EXPECT_TRUE(checkGrad({.op = "max_pool2d",
                         .attrs = {{"kernel_size", Ints{2, 2}},
                                   {"dilation", Ints{2, 2}},
                                   {"ceil_mode", int64_t{1}},
                                   {"stride", Ints{2, 2}}},
                         .inputs = {f64({1, 2, 6, 6})}}));
  // 3-D input [C, H, W], overlapping windows, ceil mode.
  EXPECT_TRUE(checkGrad({.op = "max_pool2d",
                         .attrs = {{"kernel_size", Ints{3, 2}}, {"stride", Ints{2, 1}}, {"ceil_mode", int64_t{1}}},
                         .inputs = {f64({2, 6, 4})}}));
}

TEST(GradNN, MaxPool2dTiesMatchPyTorch) {
  // Overlapping windows over ties: the first maximum in scan order wins.
  Tensor x = f64Tensor({1, 1, 4, 4}, {1, 1, 2, 2, 1, 1, 2, 2, 0, 3, 3, 0, 3, 0, 0, 3});
  expectValues(gradOfRamp("max_pool2d", {{"kernel_size", Ints{3}}, {"stride", Ints{1}}, {"padding", Ints{1}}}, x),
               {1, 0, 9, 0, 0, 0, 0, 0, 0, 90, 36, 0, 0, 0, 0, 0}, "ties k3 s1 p1");
  // All -1 beside padding: padding never wins; the first input element does.
  Tensor neg(DType::F64, {1, 1, 5, 5});
  for (int64_t i = 0; i < 25; ++i) neg.set(i, -1);
  expectValues(gradOfRamp("max_pool2d", {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}}, neg),
               {1, 2, 0, 3, 0, 4, 5, 0, 6, 0, 0, 0, 0, 0, 0, 7, 8, 0, 9, 0, 0, 0, 0, 0, 0}, "all -1 k3 s2 p1");
  Tensor bits = f64Tensor({1, 1, 5, 5}, {0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1});
  expectValues(gradOfRamp("max_pool2d",
                          {{"kernel_size", Ints{2}},
                           {"stride", Ints{2}},
                           {"padding", Ints{1}},
                           {"dilation", Ints{2}},
                           {"ceil_mode", int64_t{1}}},
                          bits),
               {0, 0, 0, 0, 0, 0, 12, 0, 9, 0, 0, 0, 0, 0, 0, 0, 15, 0, 9, 0, 0, 0, 0, 0, 0}, "dilation 2 ceil");
  expectValues(
      gradOfRamp(
          "max_pool2d",
          {{"kernel_size", Ints{2, 3}}, {"stride", Ints{2, 1}}, {"padding", Ints{1, 0}}, {"ceil_mode", int64_t{1}}},
          bits),
      {0, 3, 3, 0, 0, 4, 5, 0, 0, 6, 0, 0, 0, 0, 0, 7, 0, 17, 0, 0, 0, 0, 0, 0, 0}, "2x3 ceil");
}

TEST(GradNN, MaxPool2dNaNRoutesLikePyTorch) {
  // PyTorch's CPU scan lets every NaN replace the maximum: the last NaN wins.
  const double nan = std::nan("");
  Tensor x = f64Tensor({1, 1, 3, 3}, {1, nan, 2, nan, 0, 5, 3, 3, 3});
  expectValues(gradOfRamp("max_pool2d", {{"kernel_size", Ints{2}}, {"stride", Ints{1}}}, x),
               {0, 2, 0, 4, 0, 4, 0, 0, 0}, "NaN");
}

// ---- average pooling ------------------------------------------------------------------

TEST(GradNN, AvgPool2dVariants) {
  for (int64_t include_pad : {0, 1})
    for (int64_t ceil : {0, 1})
      EXPECT_TRUE(checkGrad({.op = "avg_pool2d",
                             .attrs = {{"kernel_size", Ints{3, 2}},
                                       {"stride", Ints{2, 3}},
                                       {"padding", Ints{1, 1}},
                                       {"ceil_mode", ceil},
                                       {"count_include_pad", include_pad}},
                             .inputs = {f64({1, 2, 6, 6})}}))
          << "count_include_pad " << include_pad << " ceil_mode " << ceil;
  EXPECT_TRUE(checkGrad({.op = "avg_pool2d",
                         .attrs = {{"kernel_size", Ints{3}}, {"padding", Ints{1}}, {"divisor_override", int64_t{5}}},
                         .inputs = {f64({2, 5, 5})}}));
}

TEST(GradNN, AvgPool2dDivisorsMatchPyTorch) {
  Tensor z5(DType::F64, {1, 1, 5, 5}), z6(DType::F64, {1, 1, 6, 6});
  AttrMap k3 = {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}, {"ceil_mode", int64_t{1}}};
  const double t = 1.0 / 9, s = 1.0 / 6;
  AttrMap a = k3;
  a["count_include_pad"] = int64_t{0};
  expectValues(gradOfRamp("avg_pool2d", a, z5),
               {0.25,
                0.5833333333333333,
                0.3333333333333333,
                1.0833333333333333,
                0.75,
                0.9166666666666666,
                1.8055555555555556,
                0.8888888888888888,
                2.638888888888889,
                1.75,
                0.6666666666666666,
                1.2222222222222223,
                0.5555555555555556,
                1.5555555555555556,
                1.0,
                2.4166666666666665,
                4.305555555555555,
                1.8888888888888888,
                5.138888888888889,
                3.25,
                1.75,
                3.083333333333333,
                1.3333333333333333,
                3.583333333333333,
                2.25},
               "count_include_pad=0");
  expectValues(gradOfRamp("avg_pool2d", k3, z5),
               {t,      3 * t, 2 * t,  5 * t,  3 * t,  5 * t,  12 * t, 7 * t, 16 * t, 9 * t, 4 * t,  9 * t, 5 * t,
                11 * t, 6 * t, 11 * t, 24 * t, 13 * t, 28 * t, 15 * t, 7 * t, 15 * t, 8 * t, 17 * t, 9 * t},
               "count_include_pad=1");
  // The last window row is clipped at the padded border: divisor 2x2, not 3x2.
  AttrMap rect = {
      {"kernel_size", Ints{3, 2}}, {"stride", Ints{2, 3}}, {"padding", Ints{1, 1}}, {"ceil_mode", int64_t{1}}};
  expectValues(gradOfRamp("avg_pool2d", rect, z6),
               {s,
                0,
                2 * s,
                2 * s,
                0,
                3 * s,
                5 * s,
                0,
                7 * s,
                7 * s,
                0,
                9 * s,
                4 * s,
                0,
                0.8333333333333334,
                0.8333333333333334,
                0,
                1.0,
                1.8333333333333335,
                0,
                2.1666666666666665,
                2.1666666666666665,
                0,
                2.5,
                1.1666666666666667,
                0,
                1.3333333333333333,
                1.3333333333333333,
                0,
                1.5,
                3.666666666666667,
                0,
                4.083333333333333,
                4.083333333333333,
                0,
                4.5},
               "clipped ceil window");
  a = {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}, {"divisor_override", int64_t{5}}};
  expectValues(gradOfRamp("avg_pool2d", a, z5), {0.2, 0.6, 0.4, 1.0, 0.6, 1.0, 2.4, 1.4, 3.2, 1.8, 0.8, 1.8, 1.0,
                                                 2.2, 1.2, 2.2, 4.8, 2.6, 5.6, 3.0, 1.4, 3.0, 1.6, 3.4, 1.8},
               "divisor_override=5");
}

// ---- adaptive pooling -----------------------------------------------------------------

TEST(GradNN, AdaptivePool2dVariants) {
  for (const char* op : {"adaptive_avg_pool2d", "adaptive_max_pool2d"}) {
    // Overlapping windows (5 -> 3, 7 -> 4), an identity axis, growing (3 -> 5), 3-D input.
    EXPECT_TRUE(checkGrad({.op = op, .attrs = {{"output_size", Ints{3, 4}}}, .inputs = {f64({1, 2, 5, 7})}})) << op;
    EXPECT_TRUE(checkGrad({.op = op, .attrs = {{"output_size", Ints{4, 5}}}, .inputs = {f64({2, 4, 3})}})) << op;
    EXPECT_TRUE(checkGrad({.op = op, .attrs = {{"output_size", Ints{1}}}, .inputs = {f64({2, 1, 3, 3})}})) << op;
  }
}

TEST(GradNN, AdaptiveMaxPool2dTiesMatchPyTorch) {
  Tensor bits = f64Tensor({1, 1, 5, 5}, {0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1});
  expectValues(gradOfRamp("adaptive_max_pool2d", {{"output_size", Ints{3, 3}}}, bits),
               {0, 3, 0, 0, 3, 4, 5, 0, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8, 0, 0, 0, 0, 0, 0, 9}, "3x3");
  expectValues(gradOfRamp("adaptive_max_pool2d", {{"output_size", Ints{2, 4}}}, bits),
               {0, 3, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 13, 8, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "2x4");
}

// ---- embedding ------------------------------------------------------------------------

TEST(GradNN, EmbeddingDuplicatesAccumulate) {
  Tensor idx = Tensor::fromInt64s({2, 3}, {1, 4, 1, 0, 4, 4});
  EXPECT_TRUE(checkGrad({.op = "embedding", .inputs = {f64({5, 3}), {DType::I64, {2, 3}}}, .fixed = {{1, idx}}}));
  // A padding_idx that does not occur changes nothing.
  EXPECT_TRUE(checkGrad({.op = "embedding",
                         .attrs = {{"padding_idx", int64_t{2}}},
                         .inputs = {f64({5, 3}), {DType::I32, {2, 3}}},
                         .fixed = {{1, idx.to(DType::I32)}}}));
}

TEST(GradNN, EmbeddingPaddingRowGetsNoGradient) {
  // PyTorch: F.embedding(idx, w, padding_idx=3) -> w.grad; aten's -1 means none.
  Tensor w = randomTensor(DType::F64, {5, 2}, 7);
  Tensor idx = Tensor::fromInt64s({2, 3}, {1, 3, 1, 0, 3, 3});
  Tensor g = f64Tensor({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  auto [pad3, k1] = runNode("embedding_backward", {g, idx}, {{"num_weights", int64_t{5}}, {"padding_idx", int64_t{3}}});
  expectValues(pad3, {7, 8, 6, 8, 0, 0, 0, 0, 0, 0}, "padding_idx=3");
  auto [none, k2] = runNode("embedding_backward", {g, idx}, {{"num_weights", int64_t{5}}});
  expectValues(none, {7, 8, 6, 8, 0, 0, 23, 26, 0, 0}, "padding_idx=-1");
  // Through the rule: the forward's padding_idx reaches the backward op.
  Graph gr;
  Value* wv = gr.addInput("w", w.type(), ValueRole::Param);
  Value* iv = gr.addInput("idx", idx.type(), ValueRole::Data);
  Value* y = gr.add("embedding", {wv, iv}, {{"padding_idx", int64_t{3}}});
  Value* gv = gr.addInput("g", g.type(), ValueRole::Data);
  auto grads = differentiate(gr, gr.add("sum", {gr.add("mul", {y, gv})}), {wv});
  ASSERT_TRUE(grads.ok()) << grads.error().message;
  gr.addOutput((*grads)[0], "dw", OutputRole::Gradient);
  auto ex = CpuExecutor::create(gr);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  auto out = ex->run({{"w", w}, {"idx", idx}, {"g", g}});
  ASSERT_TRUE(out.ok()) << out.error().message;
  expectValues((*out)[0], {7, 8, 6, 8, 0, 0, 0, 0, 0, 0}, "through autodiff");
}

TEST(GradNN, EmbeddingBackwardThreadedMatchesLoop) {
  // Large enough for the threaded path (threads split the embedding dim).
  const int64_t rows = 50, dim = 130, count = 1200;
  std::vector<int64_t> ids(count);
  for (int64_t i = 0; i < count; ++i) ids[i] = (i * 7919) % rows;
  Tensor idx = Tensor::fromInt64s({count}, ids);
  Tensor g = randomTensor(DType::F64, {count, dim}, 11);
  std::vector<double> expect(rows * dim, 0.0);
  for (int64_t i = 0; i < count; ++i)
    if (ids[i] != 7)
      for (int64_t d = 0; d < dim; ++d) expect[ids[i] * dim + d] += g.at(i * dim + d);
  AttrMap a = {{"num_weights", rows}, {"padding_idx", int64_t{7}}};
  auto [dw, kernel] = runNode("embedding_backward", {g, idx}, a);
  ASSERT_EQ(dw.numel(), rows * dim);
  for (int64_t i = 0; i < rows * dim; ++i) ASSERT_NEAR(dw.at(i), expect[i], 1e-12) << i;
  auto [dw32, kernel32] = runNode("embedding_backward", {g.to(DType::F32), idx}, a);
  EXPECT_LT(relError(dw32, dw), 1e-5);
}

TEST(GradNN, EmbeddingBackwardRejectsBadIndices) {
  Graph g;
  Value* gy = g.addInput("g", f64({3, 2}), ValueRole::Data);
  Value* idx = g.addInput("idx", {DType::I64, {3}}, ValueRole::Data);
  g.addOutput(g.add("embedding_backward", {gy, idx}, {{"num_weights", int64_t{4}}}), "dw");
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  auto out = ex->run({{"g", f64Tensor({3, 2}, {1, 2, 3, 4, 5, 6})}, {"idx", Tensor::fromInt64s({3}, {0, 4, 1})}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("out of range"), std::string::npos) << out.error().message;
  Value* bad = g.addInput("bad", f64({2, 2}), ValueRole::Data);
  EXPECT_THROW(g.create("embedding_backward", {bad, idx}, {{"num_weights", int64_t{4}}}), KilnException);
}

// ---- dropout --------------------------------------------------------------------------

TEST(GradNN, DropoutTraining) {
  // The mask (output 1) is bool: only y feeds the loss. FD sees the same mask
  // in every run (fixed seed), so it checks g * mask / (1 - p).
  for (double p : {0.0, 0.3, 0.5, 1.0})
    EXPECT_TRUE(checkGrad({.op = "dropout", .attrs = {{"p", p}, {"training", int64_t{1}}}, .inputs = {f64({4, 6})}}))
        << "p " << p;
}

TEST(GradNN, DropoutEvalIsIdentity) {
  EXPECT_TRUE(checkGrad({.op = "dropout", .attrs = {{"p", 0.5}, {"training", int64_t{0}}}, .inputs = {f64({3, 4})}}));
}

TEST(GradNN, DropoutGradientUsesMask) {
  // Half the elements dropped: their gradient is 0, the others 1 / (1 - p).
  Tensor x(DType::F64, {64});
  Graph g;
  Value* in = g.addInput("x", x.type(), ValueRole::Param);
  Node* d = g.create("dropout", {in}, {{"p", 0.5}});
  Value* loss = g.add("sum", {d->output(0)});
  auto grads = differentiate(g, loss, {in});
  ASSERT_TRUE(grads.ok()) << grads.error().message;
  g.addOutput((*grads)[0], "dx", OutputRole::Gradient);
  g.addOutput(d->output(1), "mask");
  auto ex = CpuExecutor::create(g, {.seed = 3});
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  auto out = ex->run({{"x", x}});
  ASSERT_TRUE(out.ok()) << out.error().message;
  int kept = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const bool keep = (*out)[1].at(i) != 0;
    kept += keep;
    EXPECT_EQ((*out)[0].at(i), keep ? 2.0 : 0.0) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 64);
}

// ---- composition ----------------------------------------------------------------------

TEST(GradNN, SmallConvNetGraph) {
  // conv(+bias, pad 1) -> relu -> max_pool 2 -> depthwise conv (stride 2) ->
  // dropout -> adaptive_avg_pool 1x1 -> linear-free loss: every rule here
  // composed, parameters and input checked by finite differences.
  Graph g;
  Value* x = g.addInput("x", f64({2, 2, 6, 6}), ValueRole::Param);
  Value* w1 = g.addInput("w1", f64({4, 2, 3, 3}), ValueRole::Param);
  Value* b1 = g.addInput("b1", f64({4}), ValueRole::Param);
  Value* w2 = g.addInput("w2", f64({4, 1, 3, 3}), ValueRole::Param);
  Value* h = g.add("conv2d", {x, w1, b1}, {{"padding", Ints{1, 1}}});
  h = g.add("relu", {h});
  h = g.add("max_pool2d", {h}, {{"kernel_size", Ints{2, 2}}});
  h = g.add("conv2d", {h, w2}, {{"groups", int64_t{4}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1}}});
  h = g.create("dropout", {h}, {{"p", 0.25}})->output(0);
  h = g.add("adaptive_avg_pool2d", {h}, {{"output_size", Ints{1, 1}}});
  Value* t = g.addInput("t", h->type(), ValueRole::Data);
  Value* loss = g.add("sum", {g.add("mul", {h, t})});
  g.addOutput(loss, "loss", OutputRole::Loss);
  TensorMap in = {{"x", randomTensor(DType::F64, {2, 2, 6, 6}, 21)},
                  {"w1", randomTensor(DType::F64, {4, 2, 3, 3}, 22)},
                  {"b1", randomTensor(DType::F64, {4}, 23)},
                  {"w2", randomTensor(DType::F64, {4, 1, 3, 3}, 24)},
                  {"t", randomTensor(DType::F64, h->shape(), 25)}};
  EXPECT_TRUE(checkGraphGrad(g, in, {"x", "w1", "b1", "w2"}, 1e-6, 1e-6, 5));
}

// ---- coverage -------------------------------------------------------------------------

TEST(GradNN, RulesRegistered) {
  for (const char* op :
       {"conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "embedding", "dropout"})
    EXPECT_NE(OpTable::get().find(op)->grad, nullptr) << op;
  for (const char* op :
       {"conv2d_input_backward", "conv2d_weight_backward", "max_pool2d_backward", "avg_pool2d_backward",
        "adaptive_avg_pool2d_backward", "adaptive_max_pool2d_backward", "embedding_backward"})
    EXPECT_FALSE(KernelRegistry::cpu().candidates(op).empty()) << op;
}

}  // namespace
}  // namespace kiln::testing
