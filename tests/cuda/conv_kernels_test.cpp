// CUDA convolution kernels (backend/cuda/kernels_conv.cpp: cuDNN) and pooling
// kernels (kernels_pool.cu) against the CPU reference. Convolutions: stride,
// padding, dilation, groups (depthwise), 1x1 and 7x7, forward and both
// gradients, f32 (no TF32: 1e-5, wider for long sums), f64, f16/bf16 (1e-2).
// Pools: every variant and gradient must match the CPU bit for bit (same arithmetic, same order),
// including argmax ties and NaN routing. Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/op_helpers.h"
#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t outLen(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/// One convolution's configuration; the three ops' IR built from it.
struct Conv {
  std::vector<int64_t> x, w;  // [N, C, H, W], [O, C/groups, kh, kw]
  std::vector<int64_t> stride{1, 1}, pad{0, 0}, dil{1, 1};
  int64_t groups = 1;

  std::vector<int64_t> y() const {
    return {x[0], w[0], outLen(x[2], w[2], stride[0], pad[0], dil[0]), outLen(x[3], w[3], stride[1], pad[1], dil[1])};
  }
  std::string attrs() const {
    return "stride=" + ints(stride) + ", padding=" + ints(pad) + ", dilation=" + ints(dil) +
           ", groups=" + std::to_string(groups);
  }
  std::string forward(const std::string& dt, bool bias) const {
    std::string s = "graph g(%x: " + ty(dt, x) + " data, %w: " + ty(dt, w) + " data";
    if (bias) s += ", %b: " + ty(dt, {w[0]}) + " data";
    return s + ") {\n  %0 = conv2d(%x, %w" + (bias ? ", %b" : "") + ") {" + attrs() + "} : " + ty(dt, y()) +
           "\n  return %0 \"out\"\n}\n";
  }
  std::string inputBackward(const std::string& dt) const {
    return "graph g(%g: " + ty(dt, y()) + " data, %w: " + ty(dt, w) +
           " data) {\n  %0 = conv2d_input_backward(%g, %w) {input_shape=" + ints(x) + ", " + attrs() +
           "} : " + ty(dt, x) + "\n  return %0 \"out\"\n}\n";
  }
  std::string weightBackward(const std::string& dt) const {
    return "graph g(%g: " + ty(dt, y()) + " data, %x: " + ty(dt, x) +
           " data) {\n  %0 = conv2d_weight_backward(%g, %x) {weight_shape=" + ints(w) + ", " + attrs() +
           "} : " + ty(dt, w) + "\n  return %0 \"out\"\n}\n";
  }
};

std::vector<Conv> convCases() {
  std::vector<Conv> c;
  c.push_back({{2, 3, 16, 16}, {8, 3, 3, 3}, {1, 1}, {1, 1}});             // 3x3 same
  c.push_back({{2, 4, 15, 15}, {6, 4, 3, 3}, {2, 2}, {1, 1}});             // stride 2, odd size
  c.push_back({{1, 3, 12, 12}, {4, 3, 3, 3}, {1, 1}, {2, 2}, {2, 2}});     // dilation 2
  c.push_back({{2, 8, 10, 10}, {6, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2});  // groups 2
  c.push_back({{2, 8, 12, 12}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8});  // depthwise, stride 2
  c.push_back({{2, 16, 7, 7}, {32, 16, 1, 1}});                            // 1x1
  c.push_back({{2, 16, 8, 8}, {32, 16, 1, 1}, {2, 2}});                    // strided 1x1
  c.push_back({{1, 3, 32, 32}, {16, 3, 7, 7}, {2, 2}, {3, 3}});            // 7x7 stem
  c.push_back({{2, 3, 11, 9}, {5, 3, 3, 2}, {2, 1}, {0, 1}, {1, 2}});      // asymmetric everything
  c.push_back({{1, 6, 9, 9}, {6, 2, 5, 5}, {3, 3}, {2, 2}, {1, 1}, 3});    // 5x5 groups 3 stride 3
  return c;
}

CheckOptions tolerance(const std::string& dt) {
  CheckOptions o;
  o.tol = dt == "f16" || dt == "bf16" ? 1e-2 : dt == "f64" ? 1e-12 : 1e-5;
  return o;
}

TEST(CudaConvKernels, Forward) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f32", "f64"})
    for (const Conv& c : convCases())
      for (bool bias : {false, true}) {
        SCOPED_TRACE(dt + " " + c.forward(dt, bias));
        EXPECT_EQ(expectMatchesCpu(c.forward(dt, bias), tolerance(dt)), 1);
      }
}

TEST(CudaConvKernels, InputBackward) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f32", "f64"})
    for (const Conv& c : convCases()) {
      SCOPED_TRACE(dt + " " + c.inputBackward(dt));
      EXPECT_EQ(expectMatchesCpu(c.inputBackward(dt), tolerance(dt)), 1);
    }
}

TEST(CudaConvKernels, WeightBackward) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f32", "f64"})
    for (const Conv& c : convCases()) {
      SCOPED_TRACE(dt + " " + c.weightBackward(dt));
      EXPECT_EQ(expectMatchesCpu(c.weightBackward(dt), tolerance(dt)), 1);
    }
}

TEST(CudaConvKernels, LowPrecision) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f16", "bf16"})
    for (const Conv& c : convCases()) {
      SCOPED_TRACE(dt + " " + c.forward(dt, true));
      EXPECT_EQ(expectMatchesCpu(c.forward(dt, true), tolerance(dt)), 1);
      EXPECT_EQ(expectMatchesCpu(c.inputBackward(dt), tolerance(dt)), 1);
      EXPECT_EQ(expectMatchesCpu(c.weightBackward(dt), tolerance(dt)), 1);
    }
}

TEST(CudaConvKernels, LargerShapes) {
  KILN_REQUIRE_GPU();
  // ResNet-like layers: a real workspace, heuristics picking other algorithms.
  const Conv c3{{8, 64, 28, 28}, {64, 64, 3, 3}, {1, 1}, {1, 1}};
  const Conv c1{{8, 256, 14, 14}, {128, 256, 1, 1}};
  // AlexNet's 5x5 layer at the zoo's 64x64 images and at 224x224: cuDNN's
  // heuristics offer FFT and Winograd algorithms for these, whose f32 error
  // (4.9e-4 of the largest weight-gradient element at 7x7) kernels_conv.cpp
  // now avoids.
  const Conv c5{{2, 64, 7, 7}, {192, 64, 5, 5}, {1, 1}, {2, 2}};
  const Conv c5_224{{8, 64, 27, 27}, {192, 64, 5, 5}, {1, 1}, {2, 2}};
  // Both sides sum in f32 in different orders, so their difference grows
  // like sqrt(terms summed) * 2^-24: the weight gradient of c3 sums
  // 8 * 28 * 28 = 6272 products per element, and on an H100 differed from
  // oneDNN's by 1.19e-5 of its largest element. Allowed: 8 sqrt(K) 2^-24
  // (at least the 1e-5 of the small cases), K each output's sum length.
  auto within = [](int64_t terms) {
    CheckOptions o = tolerance("f32");
    o.tol = std::max(o.tol, 8 * std::sqrt(static_cast<double>(terms)) * 0x1p-24);
    return o;
  };
  for (const Conv& c : {c3, c1, c5, c5_224}) {
    SCOPED_TRACE(c.forward("f32", true));
    const int64_t cin = c.x[1], cout = c.w[0], taps = c.w[2] * c.w[3];
    const std::vector<int64_t> y = c.y();
    const int64_t pixels = y[0] * y[2] * y[3];
    EXPECT_EQ(expectMatchesCpu(c.forward("f32", true), within(cin * taps)), 1);
    EXPECT_EQ(expectMatchesCpu(c.inputBackward("f32"), within(cout * taps)), 1);
    EXPECT_EQ(expectMatchesCpu(c.weightBackward("f32"), within(pixels)), 1);
  }
}

TEST(CudaConvKernels, WorkspaceIsPlannedOnce) {
  KILN_REQUIRE_GPU();
  const Conv c{{2, 16, 20, 20}, {32, 16, 3, 3}, {1, 1}, {1, 1}};
  auto g = parseGraph(c.forward("f32", true), "test");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const Node& n = *g->nodes().front();
  const CudaKernelDef* k = CudaKernelRegistry::get().select(n);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->name, "cudnn.conv2d");
  ASSERT_NE(k->workspace, nullptr);
  const size_t ws = k->workspace(n);
  EXPECT_LE(ws, size_t{256} << 20);
  EXPECT_EQ(k->workspace(n), ws);  // cached: the same plan every time
}

// ---- pooling ------------------------------------------------------------------------

std::string unary(const std::string& op, const std::string& attrs, const std::string& in_ty,
                  const std::string& out_ty) {
  return "graph g(%x: " + in_ty + " data) {\n  %0 = " + op + "(%x) {" + attrs + "} : " + out_ty +
         "\n  return %0 \"out\"\n}\n";
}

std::string maxBackward(const std::string& op, const std::string& attrs, const std::string& g_ty,
                        const std::string& x_ty) {
  return "graph g(%g: " + g_ty + " data, %x: " + x_ty + " data) {\n  %0 = " + op + "(%g, %x)" +
         (attrs.empty() ? "" : " {" + attrs + "}") + " : " + x_ty + "\n  return %0 \"out\"\n}\n";
}

struct Pool {
  std::vector<int64_t> x;  // [N, C, H, W] or [C, H, W]
  std::vector<int64_t> k, s, p{0, 0}, d{1, 1};
  bool ceil = false;

  std::vector<int64_t> y() const {
    std::vector<int64_t> out = x;
    const size_t h = x.size() - 2;
    out[h] = pooledLength(x[h], k[0], s.empty() ? k[0] : s[0], p[0], d[0], ceil);
    out[h + 1] = pooledLength(x[h + 1], k[1], s.empty() ? k[1] : s[1], p[1], d[1], ceil);
    return out;
  }
  std::string window(bool dilation) const {
    std::string a = "kernel_size=" + ints(k) + ", stride=" + ints(s) + ", padding=" + ints(p) +
                    ", ceil_mode=" + std::to_string(ceil ? 1 : 0);
    if (dilation) a += ", dilation=" + ints(d);
    return a;
  }
};

std::vector<Pool> maxPoolCases() {
  std::vector<Pool> c;
  c.push_back({{2, 3, 9, 9}, {3, 3}, {2, 2}, {1, 1}});
  c.push_back({{2, 3, 8, 8}, {2, 2}, {}});                              // stride = kernel
  c.push_back({{2, 3, 10, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true});  // ceil_mode
  c.push_back({{1, 2, 11, 11}, {3, 3}, {1, 1}, {1, 1}, {2, 2}});        // dilation 2
  c.push_back({{3, 7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 1}, true});       // 3-D input, asymmetric
  c.push_back({{2, 4, 13, 13}, {5, 5}, {3, 3}, {2, 2}, {1, 1}, true});
  return c;
}

std::vector<Pool> avgPoolCases() {
  std::vector<Pool> c;
  c.push_back({{2, 3, 9, 9}, {3, 3}, {2, 2}, {1, 1}});
  c.push_back({{2, 3, 8, 8}, {2, 2}, {}});
  c.push_back({{2, 3, 10, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true});
  c.push_back({{3, 7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 1}, true});
  c.push_back({{2, 4, 13, 13}, {5, 4}, {3, 3}, {2, 2}, {1, 1}, true});
  return c;
}

const char* const kDtypes[] = {"f32", "f64", "f16", "bf16"};

TEST(CudaPoolKernels, MaxPool) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : kDtypes)
    for (const Pool& c : maxPoolCases()) {
      const std::string x = ty(dt, c.x), y = ty(dt, c.y());
      SCOPED_TRACE(dt + " " + c.window(true));
      CheckOptions o;
      o.tol = 0;  // exact
      EXPECT_EQ(expectMatchesCpu(unary("max_pool2d", c.window(true), x, y), o), 1);
      EXPECT_EQ(expectMatchesCpu(maxBackward("max_pool2d_backward", c.window(true), y, x), o), 1);
    }
}

TEST(CudaPoolKernels, AvgPool) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : kDtypes)
    for (const Pool& c : avgPoolCases())
      for (int include_pad : {0, 1})
        for (int divisor : {0, 5}) {
          const std::string x = ty(dt, c.x), y = ty(dt, c.y());
          const std::string attrs = c.window(false) + ", count_include_pad=" + std::to_string(include_pad) +
                                    ", divisor_override=" + std::to_string(divisor);
          SCOPED_TRACE(dt + " " + attrs);
          CheckOptions o;
          o.tol = 0;
          EXPECT_EQ(expectMatchesCpu(unary("avg_pool2d", attrs, x, y), o), 1);
          const std::string back = "graph g(%g: " + y +
                                   " data) {\n  %0 = avg_pool2d_backward(%g) {input_shape=" + ints(c.x) + ", " + attrs +
                                   "} : " + x + "\n  return %0 \"out\"\n}\n";
          EXPECT_EQ(expectMatchesCpu(back, o), 1);
        }
}

TEST(CudaPoolKernels, AdaptivePools) {
  KILN_REQUIRE_GPU();
  struct Case {
    std::vector<int64_t> x, size;
  };
  const Case cases[] = {{{2, 3, 10, 7}, {3, 4}}, {{2, 3, 10, 7}, {4, 3}}, {{2, 2, 3, 3}, {5, 5}},
                        {{3, 8, 8}, {1, 1}},     {{1, 4, 7, 7}, {7, 7}},  {{2, 3, 13, 5}, {6, 2}}};
  for (const std::string dt : kDtypes)
    for (const Case& c : cases) {
      std::vector<int64_t> out = c.x;
      out[out.size() - 2] = c.size[0];
      out[out.size() - 1] = c.size[1];
      const std::string x = ty(dt, c.x), y = ty(dt, out), attrs = "output_size=" + ints(c.size);
      SCOPED_TRACE(dt + " " + x + " -> " + y);
      CheckOptions o;
      o.tol = 0;
      EXPECT_EQ(expectMatchesCpu(unary("adaptive_avg_pool2d", attrs, x, y), o), 1);
      EXPECT_EQ(expectMatchesCpu(unary("adaptive_max_pool2d", attrs, x, y), o), 1);
      const std::string back = "graph g(%g: " + y +
                               " data) {\n  %0 = adaptive_avg_pool2d_backward(%g) {input_shape=" + ints(c.x) +
                               "} : " + x + "\n  return %0 \"out\"\n}\n";
      EXPECT_EQ(expectMatchesCpu(back, o), 1);
      EXPECT_EQ(expectMatchesCpu(maxBackward("adaptive_max_pool2d_backward", "", y, x), o), 1);
    }
}

TEST(CudaPoolKernels, MaxTiesAndNaN) {
  KILN_REQUIRE_GPU();
  // Ties route to the first maximum in window order, a NaN wins (the last
  // one), -inf windows route to their first element: as the CPU.
  const Pool c{{1, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true};
  const std::string x = ty("f32", c.x), y = ty("f32", c.y());
  Tensor xt(TensorType{DType::F32, {1, 2, 7, 7}});
  for (int64_t i = 0; i < xt.numel(); ++i) {
    double v = static_cast<double>((i * 7) % 3);  // many ties
    if (i == 10 || i == 12 || i == 60) v = NAN;
    if (i >= 70 && i < 91) v = -INFINITY;  // rows 3-5 of plane 1: a window of only -inf
    xt.set(i, v);
  }
  Tensor gt(TensorType{DType::F32, c.y()});
  for (int64_t i = 0; i < gt.numel(); ++i) gt.set(i, 1.0 + static_cast<double>(i));
  EXPECT_EQ(expectMatchesCpuOn(unary("max_pool2d", c.window(true), x, y), {{"x", xt}}, {.tol = 0}), 1);
  EXPECT_EQ(
      expectMatchesCpuOn(maxBackward("max_pool2d_backward", c.window(true), y, x), {{"g", gt}, {"x", xt}}, {.tol = 0}),
      1);
  EXPECT_EQ(expectMatchesCpuOn(unary("adaptive_max_pool2d", "output_size=[3,4]", x, ty("f32", {1, 2, 3, 4})),
                               {{"x", xt}}, {.tol = 0}),
            1);
  Tensor ga(TensorType{DType::F32, {1, 2, 3, 4}});
  for (int64_t i = 0; i < ga.numel(); ++i) ga.set(i, 0.5 * static_cast<double>(i + 1));
  EXPECT_EQ(expectMatchesCpuOn(maxBackward("adaptive_max_pool2d_backward", "", ty("f32", {1, 2, 3, 4}), x),
                               {{"g", ga}, {"x", xt}}, {.tol = 0}),
            1);
}

}  // namespace
}  // namespace kiln::cuda::test
