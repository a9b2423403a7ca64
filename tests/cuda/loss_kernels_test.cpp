// CUDA loss, embedding and dropout kernels (backend/cuda/kernels_loss.cu, kernels_embedding.cu, kernels_dropout.cu)
// against the CPU reference: cross_entropy and its backward over short rows
// (a warp each), GPT-2's 50257 classes (a block each) and a class dim that
// is not innermost, every reduction, ignore_index, label smoothing; nll_loss
// and its backward; mse_loss with broadcasting; embedding and its backward
// at GPT-2's size; dropout masks equal to the CPU's bit for bit; targets and
// indices out of range raising the node's data fault. Skips visibly without
// a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

struct ClassCase {
  const char* x;       ///< logits shape
  const char* target;  ///< target shape
  const char* none;    ///< shape of the unreduced loss
  int64_t classes;
};

// Short rows (a warp each, one or 32 registers a lane), long rows (a block
// each, GPT-2's vocabulary), the class dim in the middle (a thread per
// position), one unbatched sample.
const std::vector<ClassCase> kClassCases = {
    {"[37,1000]", "[37]", "[37]", 1000},   {"[64,20]", "[64]", "[64]", 20},        {"[37,10]", "[37]", "[37]", 10},
    {"[37,50257]", "[37]", "[37]", 50257}, {"[5,7,4,3]", "[5,4,3]", "[5,4,3]", 7}, {"[10]", "[]", "[]", 10},
    {"[3,2000]", "[3]", "[3]", 2000},
};

std::string crossEntropyIr(const std::string& dt, const ClassCase& c, const std::string& tdt,
                           const std::string& reduction, const std::string& extra) {
  const std::string out = reduction == "none" ? dt + c.none : dt + "[]";
  return "graph g(%x: " + dt + c.x + " data, %t: " + tdt + c.target +
         " data) {\n  %l = cross_entropy(%x, %t) {reduction=\"" + reduction + "\"" + extra + "} : " + out +
         "\n  return %l \"loss\"\n}\n";
}

std::string crossEntropyBackwardIr(const std::string& dt, const ClassCase& c, const std::string& tdt,
                                   const std::string& reduction, const std::string& extra) {
  const std::string g = reduction == "none" ? dt + c.none : dt + "[]";
  return "graph g(%g: " + g + " data, %x: " + dt + c.x + " data, %t: " + tdt + c.target +
         " data) {\n  %d = cross_entropy_backward(%g, %x, %t) {reduction=\"" + reduction + "\"" + extra + "} : " + dt +
         c.x + "\n  return %d \"dx\"\n}\n";
}

const std::vector<std::pair<std::string, double>> kFloatTypes = {
    {"f32", 1e-5}, {"f64", 1e-10}, {"bf16", 1e-2}, {"f16", 1e-2}};

// label smoothing, and ignore_index 3 hit by about one target in C.
const std::vector<std::string> kClassExtras = {"", ", label_smoothing=0.1", ", ignore_index=3",
                                               ", ignore_index=3, label_smoothing=0.25"};

TEST(CudaLossKernels, CrossEntropy) {
  KILN_REQUIRE_GPU();
  for (const auto& [dt, tol] : kFloatTypes)
    for (const ClassCase& c : kClassCases)
      for (const char* red : {"mean", "sum", "none"})
        for (const std::string& extra : kClassExtras) {
          const std::string ir = crossEntropyIr(dt, c, "i64", red, extra);
          SCOPED_TRACE(ir);
          expectMatchesCpu(ir, {.tol = tol, .int_bound = c.classes});
        }
  // Other target dtypes.
  expectMatchesCpu(crossEntropyIr("f32", kClassCases[0], "i32", "mean", ""), {.tol = 1e-5, .int_bound = 1000});
  expectMatchesCpu(crossEntropyIr("f32", kClassCases[2], "u8", "none", ""), {.tol = 1e-5, .int_bound = 10});
}

TEST(CudaLossKernels, CrossEntropyBackward) {
  KILN_REQUIRE_GPU();
  for (const auto& [dt, tol] : kFloatTypes)
    for (const ClassCase& c : kClassCases)
      for (const char* red : {"mean", "sum", "none"})
        for (const std::string& extra : kClassExtras) {
          const std::string ir = crossEntropyBackwardIr(dt, c, "i64", red, extra);
          SCOPED_TRACE(ir);
          expectMatchesCpu(ir, {.tol = tol, .int_bound = c.classes});
        }
  expectMatchesCpu(crossEntropyBackwardIr("f32", kClassCases[3], "i32", "mean", ""), {.tol = 1e-5, .int_bound = 50257});
}

// Every target ignored: "mean" is 0/0 = NaN, the gradient all zeros.
TEST(CudaLossKernels, CrossEntropyWithEveryTargetIgnored) {
  KILN_REQUIRE_GPU();
  const ClassCase c = kClassCases[2];
  expectMatchesCpu(crossEntropyIr("f32", c, "i64", "mean", ", ignore_index=0"), {.int_bound = 1});
  expectMatchesCpu(crossEntropyBackwardIr("f32", c, "i64", "mean", ", ignore_index=0"), {.int_bound = 1});
}

std::string nllIr(const std::string& dt, const ClassCase& c, const std::string& reduction, const std::string& extra) {
  const std::string out = reduction == "none" ? dt + c.none : dt + "[]";
  return "graph g(%x: " + dt + c.x + " data, %t: i64" + c.target + " data) {\n  %l = nll_loss(%x, %t) {reduction=\"" +
         reduction + "\"" + extra + "} : " + out + "\n  return %l \"loss\"\n}\n";
}

std::string nllBackwardIr(const std::string& dt, const ClassCase& c, const std::string& reduction,
                          const std::string& extra) {
  const std::string g = reduction == "none" ? dt + c.none : dt + "[]";
  return "graph g(%g: " + g + " data, %t: i64" + c.target + " data) {\n  %d = nll_loss_backward(%g, %t) {reduction=\"" +
         reduction + "\", num_classes=" + std::to_string(c.classes) + extra + "} : " + dt + c.x +
         "\n  return %d \"dx\"\n}\n";
}

TEST(CudaLossKernels, NllLossAndBackward) {
  KILN_REQUIRE_GPU();
  for (const auto& [dt, tol] : kFloatTypes)
    for (const ClassCase& c : kClassCases)
      for (const char* red : {"mean", "sum", "none"})
        for (const char* extra : {"", ", ignore_index=3"}) {
          SCOPED_TRACE(dt + c.x + " " + red + extra);
          // Positive log-probabilities: a sum of them cannot cancel to nearly nothing.
          expectMatchesCpu(nllIr(dt, c, red, extra), {.tol = tol, .int_bound = c.classes, .positive = true});
          expectMatchesCpu(nllBackwardIr(dt, c, red, extra), {.tol = tol, .int_bound = c.classes});
        }
  // A long batch: the scalar reduction runs over several blocks.
  const ClassCase many{"[100003,3]", "[100003]", "[100003]", 3};
  expectMatchesCpu(nllIr("f32", many, "mean", ", ignore_index=1"), {.tol = 1e-5, .int_bound = 3, .positive = true});
  expectMatchesCpu(nllBackwardIr("f32", many, "mean", ", ignore_index=1"), {.tol = 1e-5, .int_bound = 3});
}

std::string mseIr(const std::string& dt, const std::string& a, const std::string& b, const std::string& out,
                  const std::string& reduction) {
  const std::string o = reduction == "none" ? dt + out : dt + "[]";
  return "graph g(%a: " + dt + a + " data, %b: " + dt + b + " data) {\n  %l = mse_loss(%a, %b) {reduction=\"" +
         reduction + "\"} : " + o + "\n  return %l \"loss\"\n}\n";
}

TEST(CudaLossKernels, MseLossWithBroadcasting) {
  KILN_REQUIRE_GPU();
  struct Shapes {
    const char *a, *b, *out;
  };
  const std::vector<Shapes> shapes = {{"[37,129]", "[37,129]", "[37,129]"}, {"[37,129]", "[129]", "[37,129]"},
                                      {"[37,1]", "[1,129]", "[37,129]"},    {"[]", "[5,6]", "[5,6]"},
                                      {"[3,1,7]", "[4,1]", "[3,4,7]"},      {"[1000003]", "[1000003]", "[1000003]"}};
  for (const auto& [dt, tol] : kFloatTypes)
    for (const Shapes& s : shapes)
      for (const char* red : {"mean", "sum", "none"}) {
        SCOPED_TRACE(dt + s.a + " " + s.b + " " + red);
        expectMatchesCpu(mseIr(dt, s.a, s.b, s.out, red), {.tol = tol});
      }
}

std::string embeddingIr(const std::string& wdt, const std::string& w, const std::string& idt, const std::string& idx,
                        const std::string& out, const std::string& attrs) {
  return "graph g(%w: " + wdt + w + " data, %i: " + idt + idx + " data) {\n  %y = embedding(%w, %i)" +
         (attrs.empty() ? "" : " {" + attrs + "}") + " : " + wdt + out + "\n  return %y \"y\"\n}\n";
}

TEST(CudaLossKernels, Embedding) {
  KILN_REQUIRE_GPU();
  // 16-byte rows, 2-byte rows (33 bf16), 1-byte rows, doubles, GPT-2's table.
  expectMatchesCpu(embeddingIr("f32", "[100,64]", "i64", "[8,13]", "[8,13,64]", ""), {.tol = 0, .int_bound = 100});
  expectMatchesCpu(embeddingIr("f32", "[100,64]", "i32", "[8,13]", "[8,13,64]", "padding_idx=3"),
                   {.tol = 0, .int_bound = 100});
  expectMatchesCpu(embeddingIr("bf16", "[50,33]", "i64", "[77]", "[77,33]", ""), {.tol = 0, .int_bound = 50});
  expectMatchesCpu(embeddingIr("u8", "[50,7]", "u8", "[5,9]", "[5,9,7]", ""), {.tol = 0, .int_bound = 50});
  expectMatchesCpu(embeddingIr("f64", "[20,5]", "i16", "[3]", "[3,5]", ""), {.tol = 0, .int_bound = 20});
  expectMatchesCpu(embeddingIr("f32", "[50257,768]", "i64", "[4,2048]", "[4,2048,768]", ""),
                   {.tol = 0, .int_bound = 50257});
}

std::string embeddingBackwardIr(const std::string& dt, const std::string& g, const std::string& idx, int64_t rows,
                                int64_t dim, const std::string& attrs) {
  return "graph g(%g: " + dt + g + " data, %i: i64" + idx +
         " data) {\n  %d = embedding_backward(%g, %i) {num_weights=" + std::to_string(rows) + attrs + "} : " + dt +
         "[" + std::to_string(rows) + "," + std::to_string(dim) + "]\n  return %d \"dw\"\n}\n";
}

TEST(CudaLossKernels, EmbeddingBackward) {
  KILN_REQUIRE_GPU();
  for (const auto& [dt, tol] : kFloatTypes)
    for (const char* attrs :
         {"", ", padding_idx=5", ", scale_grad_by_freq=1", ", padding_idx=0, scale_grad_by_freq=1"}) {
      SCOPED_TRACE(dt + attrs);
      // Indices in [0, 20) of 100 rows: repeats, and rows never looked up.
      expectMatchesCpu(embeddingBackwardIr(dt, "[8,13,64]", "[8,13]", 100, 64, attrs), {.tol = tol, .int_bound = 20});
      expectMatchesCpu(embeddingBackwardIr(dt, "[77,33]", "[77]", 50, 33, attrs), {.tol = tol, .int_bound = 50});
    }
  // GPT-2: 8192 positions into 50257 rows of 768, linear in the positions.
  expectMatchesCpu(embeddingBackwardIr("f32", "[4,2048,768]", "[4,2048]", 50257, 768, ""),
                   {.tol = 1e-5, .int_bound = 50257});
  expectMatchesCpu(embeddingBackwardIr("bf16", "[4,2048,768]", "[4,2048]", 50257, 768, ""),
                   {.tol = 1e-2, .int_bound = 50257});
  // No positions: all zeros.
  expectMatchesCpu(embeddingBackwardIr("f32", "[0,16]", "[0]", 10, 16, ""), {.tol = 0});
}

std::string dropoutIr(const std::string& type, double p, bool training) {
  const std::string attrs = "{p=" + std::to_string(p) + ", training=" + (training ? "1" : "0") + "}";
  std::string mask = type.substr(type.find('['));
  if (training)
    return "graph g(%x: " + type + " data) {\n  %y, %m = dropout(%x) " + attrs + " : " + type + ", bool" + mask +
           "\n  return %y \"y\", %m \"mask\"\n}\n";
  return "graph g(%x: " + type + " data) {\n  %y = dropout(%x) " + attrs + " : " + type + "\n  return %y \"y\"\n}\n";
}

// The mask is the CPU's bit for bit (same counter-based generator, same
// seed mixing with the node index); kept values are x * (1 / (1 - p)) in
// the same precision, so outputs are exact.
TEST(CudaLossKernels, DropoutMatchesTheCpuMaskExactly) {
  KILN_REQUIRE_GPU();
  for (const char* type : {"f32[37,1000]", "bf16[37,1000]", "f16[1000003]", "f64[5,7]"})
    for (double p : {0.1, 0.5, 0.0, 1.0})
      for (uint64_t seed : {7ull, 12345ull, 0xDEADBEEFCAFEull}) {
        SCOPED_TRACE(std::string(type) + " p=" + std::to_string(p) + " seed=" + std::to_string(seed));
        expectMatchesCpu(dropoutIr(type, p, true), {.tol = 0, .run_seed = seed});
      }
  expectMatchesCpu(dropoutIr("f32[37,1000]", 0.3, false), {.tol = 0});
}

/// The data-fault flag the default CUDA kernel raises on `in`.
int faultFlag(const std::string& ir, const std::function<void(TensorMap&)>& corrupt, const CheckOptions& o) {
  auto g = parseGraph(ir, "test");
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return -1;
  TensorMap in = drawInputs(*g, o);
  corrupt(in);
  const Node& n = *g->nodes().front();
  std::vector<Tensor> args;
  for (const Value* v : n.inputs()) args.push_back(in.at(v->name()));
  auto r = runNode(n, args, nullptr, {.seed = 7, .node_index = 4});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r->error_flag : -1;
}

// An index out of range cannot throw from the device: the kernel skips it
// and records node_index + 1 for the executor to report.
TEST(CudaLossKernels, OutOfRangeTargetsAndIndicesRaiseTheDataFault) {
  KILN_REQUIRE_GPU();
  auto setTarget = [](const char* name, int64_t i, double v) { return [=](TensorMap& in) { in.at(name).set(i, v); }; };
  const ClassCase c = kClassCases[0];
  for (const char* red : {"mean", "none"}) {
    EXPECT_EQ(faultFlag(crossEntropyIr("f32", c, "i64", red, ""), setTarget("t", 5, 1000), {.int_bound = 1000}), 5);
    EXPECT_EQ(
        faultFlag(crossEntropyIr("f32", kClassCases[3], "i64", red, ""), setTarget("t", 1, -2), {.int_bound = 50257}),
        5);
    EXPECT_EQ(faultFlag(crossEntropyBackwardIr("f32", c, "i64", red, ""), setTarget("t", 0, 1000), {.int_bound = 1000}),
              5);
    EXPECT_EQ(faultFlag(nllIr("f32", c, red, ""), setTarget("t", 36, 5000), {.int_bound = 1000}), 5);
    EXPECT_EQ(faultFlag(nllBackwardIr("f32", c, red, ""), setTarget("t", 36, 5000), {.int_bound = 1000}), 5);
  }
  // ignore_index is not a fault.
  EXPECT_EQ(faultFlag(crossEntropyIr("f32", c, "i64", "mean", ""), setTarget("t", 5, -100), {.int_bound = 1000}), 0);
  EXPECT_EQ(faultFlag(embeddingIr("f32", "[100,64]", "i64", "[8,13]", "[8,13,64]", ""), setTarget("i", 7, 100),
                      {.int_bound = 100}),
            5);
  EXPECT_EQ(faultFlag(embeddingBackwardIr("f32", "[8,13,64]", "[8,13]", 100, 64, ""), setTarget("i", 3, -1),
                      {.int_bound = 100}),
            5);
}

}  // namespace
}  // namespace kiln::cuda::test
