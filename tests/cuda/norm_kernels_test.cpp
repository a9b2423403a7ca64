// CUDA softmax and normalization kernels (backend/cuda/kernels_softmax.cu, kernels_norm.cu)
// against the CPU reference: every path (a warp per short row, a block per
// long row such as GPT-2's 50257-wide logits, a thread per column when the
// dim is not innermost), batch_norm in training and eval, mixed precision
// parameters, odd sizes throughout. Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

std::string unaryIr(const std::string& op, const std::string& type, const std::string& attrs) {
  return "graph g(%x: " + type + " data) {\n  %y = " + op + "(%x) {" + attrs + "} : " + type +
         "\n  return %y \"y\"\n}\n";
}

/// softmax_backward-style (g, y) -> gx of one type.
std::string binaryIr(const std::string& op, const std::string& type, const std::string& attrs) {
  return "graph g(%g: " + type + " data, %y: " + type + " data) {\n  %d = " + op + "(%g, %y) {" + attrs +
         "} : " + type + "\n  return %d \"d\"\n}\n";
}

struct Case {
  const char* shape;
  const char* attrs;
};

// Rows of 1000 (a warp each), 20 (a warp, one register), 1500 and 50257 (a
// block each), a middle dim (a thread per column), an outer dim, a scalar.
const std::vector<Case> kSoftmaxCases = {
    {"[37,1000]", "dim=1"}, {"[37,20]", "dim=-1"}, {"[5,1500]", "dim=1"},  {"[37,50257]", "dim=1"},
    {"[8,33,17]", "dim=1"}, {"[33,17]", "dim=0"},  {"[3,7,129]", "dim=2"}, {"[]", "dim=0"},
};

void checkSoftmaxFamily(const std::string& op, bool backward) {
  const std::vector<std::pair<std::string, double>> types = {
      {"f32", 1e-5}, {"f64", 1e-12}, {"bf16", 1e-2}, {"f16", 1e-2}};
  for (const auto& [dt, tol] : types)
    for (const Case& c : kSoftmaxCases) {
      const std::string type = dt + c.shape;
      SCOPED_TRACE(op + " " + type + " {" + c.attrs + "}");
      expectMatchesCpu(backward ? binaryIr(op, type, c.attrs) : unaryIr(op, type, c.attrs), {.tol = tol});
    }
}

TEST(CudaNormKernels, Softmax) {
  KILN_REQUIRE_GPU();
  checkSoftmaxFamily("softmax", false);
}

TEST(CudaNormKernels, LogSoftmax) {
  KILN_REQUIRE_GPU();
  checkSoftmaxFamily("log_softmax", false);
}

TEST(CudaNormKernels, SoftmaxBackward) {
  KILN_REQUIRE_GPU();
  checkSoftmaxFamily("softmax_backward", true);
}

TEST(CudaNormKernels, LogSoftmaxBackward) {
  KILN_REQUIRE_GPU();
  checkSoftmaxFamily("log_softmax_backward", true);
}

// Large logits (a shifted row) and rows of -inf: the max subtraction and the
// CPU's all -inf convention.
TEST(CudaNormKernels, SoftmaxOfLargeAndInfiniteLogits) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"softmax", "log_softmax"})
    for (const char* shape : {"[4,300]", "[4,3000]"}) {
      auto g = parseGraph(unaryIr(op, std::string("f32") + shape, "dim=1"), "test");
      ASSERT_TRUE(g.ok()) << g.error().message;
      TensorMap in = drawInputs(*g, {});
      Tensor& x = in.at("x");
      const int64_t n = x.shape()[1];
      for (int64_t k = 0; k < n; ++k) {
        x.set(k, x.at(k) + 1000.0);                     // row 0: large
        x.set(n + k, k % 3 ? -INFINITY : x.at(n + k));  // row 1: mostly -inf
        x.set(2 * n + k, -INFINITY);                    // row 2: all -inf (NaN, as the CPU)
      }
      const Node& node = *g->nodes().front();
      auto cpu = CpuExecutor::create(*g, {});
      ASSERT_TRUE(cpu.ok()) << cpu.error().message;
      auto ref = cpu->run(in);
      ASSERT_TRUE(ref.ok()) << ref.error().message;
      const std::vector<Tensor> args = {in.at("x")};
      auto r = runNode(node, args);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_LE(parityError(r->outputs[0], (*ref)[0]), 1e-5) << op << shape;
    }
}

std::string layerNormIr(const std::string& dt, const std::string& pdt, const std::string& shape,
                        const std::string& norm) {
  return "graph g(%x: " + dt + shape + " data, %w: " + pdt + norm + " data, %b: " + pdt + norm +
         " data) {\n  %y = layer_norm(%x, %w, %b) {normalized_shape=" + norm + "} : " + dt + shape +
         "\n  return %y \"y\"\n}\n";
}

std::string layerNormBackwardIr(const std::string& dt, const std::string& pdt, const std::string& shape,
                                const std::string& norm) {
  return "graph g(%g: " + dt + shape + " data, %x: " + dt + shape + " data, %w: " + pdt + norm +
         " data) {\n  %a, %b, %c = layer_norm_backward(%g, %x, %w) {normalized_shape=" + norm + "} : " + dt + shape +
         ", " + pdt + norm + ", " + pdt + norm + "\n  return %a \"gx\", %b \"gw\", %c \"gb\"\n}\n";
}

// Rows of 768 (GPT-2, a warp each), 60 over two dims, 1 (a row per
// element), 1500 and 5000 (a block each); 2048 rows make the column sums of
// the backward split over blocks.
const std::vector<std::pair<const char*, const char*>> kLayerCases = {
    {"[37,768]", "[768]"},  {"[4,6,10]", "[6,10]"}, {"[9,5]", "[]"},      {"[5,1500]", "[1500]"},
    {"[3,5000]", "[5000]"}, {"[2048,64]", "[64]"},  {"[2,3,33]", "[33]"},
};

TEST(CudaNormKernels, LayerNorm) {
  KILN_REQUIRE_GPU();
  for (const auto& [shape, norm] : kLayerCases) {
    SCOPED_TRACE(std::string(shape) + " over " + norm);
    expectMatchesCpu(layerNormIr("f32", "f32", shape, norm), {.tol = 1e-5});
    expectMatchesCpu(layerNormIr("f64", "f64", shape, norm), {.tol = 1e-12});
    expectMatchesCpu(layerNormIr("bf16", "bf16", shape, norm), {.tol = 1e-2});
    expectMatchesCpu(layerNormIr("f16", "f16", shape, norm), {.tol = 1e-2});
    expectMatchesCpu(layerNormIr("bf16", "f32", shape, norm), {.tol = 1e-2});
  }
  // A large mean: the statistics must not cancel.
  expectMatchesCpu(layerNormIr("f32", "f32", "[4,3000]", "[3000]"), {.tol = 1e-5, .positive = true});
}

TEST(CudaNormKernels, LayerNormBackward) {
  KILN_REQUIRE_GPU();
  for (const auto& [shape, norm] : kLayerCases) {
    SCOPED_TRACE(std::string(shape) + " over " + norm);
    expectMatchesCpu(layerNormBackwardIr("f32", "f32", shape, norm), {.tol = 1e-5});
    expectMatchesCpu(layerNormBackwardIr("f64", "f64", shape, norm), {.tol = 1e-12});
    expectMatchesCpu(layerNormBackwardIr("bf16", "bf16", shape, norm), {.tol = 1e-2});
    expectMatchesCpu(layerNormBackwardIr("f16", "f16", shape, norm), {.tol = 1e-2});
    expectMatchesCpu(layerNormBackwardIr("bf16", "f32", shape, norm), {.tol = 1e-2});
  }
}

std::string batchNormIr(const std::string& dt, const std::string& pdt, const std::string& shape, int64_t channels,
                        bool training) {
  const std::string c = pdt + "[" + std::to_string(channels) + "]";
  std::string ir = "graph g(%x: " + dt + shape + " data, %w: " + c + " data, %b: " + c + " data, %m: " + c +
                   " data, %v: " + c + " data) {\n";
  if (training)
    ir += "  %y, %nm, %nv = batch_norm(%x, %w, %b, %m, %v) {training=1, momentum=0.1, eps=0.00001} : " + dt + shape +
          ", " + c + ", " + c + "\n  return %y \"y\", %nm \"mean\", %nv \"var\"\n}\n";
  else
    ir += "  %y = batch_norm(%x, %w, %b, %m, %v) {training=0} : " + dt + shape + "\n  return %y \"y\"\n}\n";
  return ir;
}

std::string batchNormBackwardIr(const std::string& dt, const std::string& pdt, const std::string& shape,
                                int64_t channels, bool training) {
  const std::string c = pdt + "[" + std::to_string(channels) + "]";
  std::string ir = "graph g(%g: " + dt + shape + " data, %x: " + dt + shape + " data, %w: " + c + " data";
  if (!training) ir += ", %m: " + c + " data, %v: " + c + " data";
  ir += ") {\n  %a, %b, %c = batch_norm_backward(%g, %x, %w" + std::string(training ? "" : ", %m, %v") +
        ") {training=" + (training ? "1" : "0") + ", eps=0.00001} : " + dt + shape + ", " + c + ", " + c +
        "\n  return %a \"gx\", %b \"gw\", %c \"gb\"\n}\n";
  return ir;
}

// Channels over batch and space (row reductions), a 2-D input (column
// reductions), few channels with long planes (split over blocks), batch 1.
const std::vector<std::pair<const char*, int64_t>> kBatchCases = {
    {"[8,16,13,11]", 16}, {"[64,32]", 32}, {"[2,3,5000]", 3}, {"[1,5,7,9]", 5}, {"[300,7,3]", 7},
};

TEST(CudaNormKernels, BatchNormTrainingAndEval) {
  KILN_REQUIRE_GPU();
  for (const auto& [shape, channels] : kBatchCases)
    for (bool training : {true, false}) {
      SCOPED_TRACE(std::string(shape) + (training ? " training" : " eval"));
      // Eval divides by sqrt(running_var + eps): positive inputs.
      const bool pos = !training;
      expectMatchesCpu(batchNormIr("f32", "f32", shape, channels, training), {.tol = 1e-5, .positive = pos});
      expectMatchesCpu(batchNormIr("f64", "f64", shape, channels, training), {.tol = 1e-12, .positive = pos});
      expectMatchesCpu(batchNormIr("bf16", "bf16", shape, channels, training), {.tol = 1e-2, .positive = pos});
      expectMatchesCpu(batchNormIr("f16", "f16", shape, channels, training), {.tol = 1e-2, .positive = pos});
      expectMatchesCpu(batchNormIr("bf16", "f32", shape, channels, training), {.tol = 1e-2, .positive = pos});
    }
}

TEST(CudaNormKernels, BatchNormBackwardTrainingAndEval) {
  KILN_REQUIRE_GPU();
  for (const auto& [shape, channels] : kBatchCases)
    for (bool training : {true, false}) {
      SCOPED_TRACE(std::string(shape) + (training ? " training" : " eval"));
      const bool pos = !training;
      expectMatchesCpu(batchNormBackwardIr("f32", "f32", shape, channels, training), {.tol = 1e-5, .positive = pos});
      expectMatchesCpu(batchNormBackwardIr("f64", "f64", shape, channels, training), {.tol = 1e-12, .positive = pos});
      expectMatchesCpu(batchNormBackwardIr("bf16", "bf16", shape, channels, training), {.tol = 1e-2, .positive = pos});
      expectMatchesCpu(batchNormBackwardIr("bf16", "f32", shape, channels, training), {.tol = 1e-2, .positive = pos});
    }
}

std::string groupNormIr(const std::string& dt, const std::string& shape, int64_t channels, int64_t groups) {
  const std::string c = dt + "[" + std::to_string(channels) + "]";
  return "graph g(%x: " + dt + shape + " data, %w: " + c + " data, %b: " + c +
         " data) {\n  %y = group_norm(%x, %w, %b) {num_groups=" + std::to_string(groups) + "} : " + dt + shape +
         "\n  return %y \"y\"\n}\n";
}

std::string groupNormBackwardIr(const std::string& dt, const std::string& shape, int64_t channels, int64_t groups) {
  const std::string c = dt + "[" + std::to_string(channels) + "]";
  return "graph g(%g: " + dt + shape + " data, %x: " + dt + shape + " data, %w: " + c +
         " data) {\n  %a, %b, %c = group_norm_backward(%g, %x, %w) {num_groups=" + std::to_string(groups) +
         "} : " + dt + shape + ", " + c + ", " + c + "\n  return %a \"gx\", %b \"gw\", %c \"gb\"\n}\n";
}

struct GroupCase {
  const char* shape;
  int64_t channels, groups;
};
const std::vector<GroupCase> kGroupCases = {
    {"[4,12,7,9]", 12, 3}, {"[2,32,1000]", 32, 8}, {"[16,6]", 6, 2}, {"[3,5,11]", 5, 5}, {"[1,8,4099]", 8, 1},
};

TEST(CudaNormKernels, GroupNorm) {
  KILN_REQUIRE_GPU();
  for (const GroupCase& c : kGroupCases) {
    SCOPED_TRACE(c.shape);
    expectMatchesCpu(groupNormIr("f32", c.shape, c.channels, c.groups), {.tol = 1e-5});
    expectMatchesCpu(groupNormIr("f64", c.shape, c.channels, c.groups), {.tol = 1e-12});
    expectMatchesCpu(groupNormIr("bf16", c.shape, c.channels, c.groups), {.tol = 1e-2});
    expectMatchesCpu(groupNormIr("f16", c.shape, c.channels, c.groups), {.tol = 1e-2});
  }
}

TEST(CudaNormKernels, GroupNormBackward) {
  KILN_REQUIRE_GPU();
  for (const GroupCase& c : kGroupCases) {
    SCOPED_TRACE(c.shape);
    expectMatchesCpu(groupNormBackwardIr("f32", c.shape, c.channels, c.groups), {.tol = 1e-5});
    expectMatchesCpu(groupNormBackwardIr("f64", c.shape, c.channels, c.groups), {.tol = 1e-12});
    expectMatchesCpu(groupNormBackwardIr("bf16", c.shape, c.channels, c.groups), {.tol = 1e-2});
  }
}

}  // namespace
}  // namespace kiln::cuda::test
