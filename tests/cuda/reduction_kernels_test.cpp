// CUDA reduction kernels (backend/cuda/kernels_reduction.cu) against the CPU
// reference: sum, mean, prod, amax, amin, var over inner, outer, middle,
// multiple and all dims with and without keepdim; argmax/argmin;
// prod_backward (with zeros in the slices); a full reduction long enough to
// split over blocks. Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

/// A one-node graph: %y = op(%x) {attrs} : out.
std::string unaryIr(const std::string& op, const std::string& in, const std::string& attrs, const std::string& out) {
  return "graph g(%x: " + in + " data) {\n  %y = " + op + "(%x)" + (attrs.empty() ? "" : " {" + attrs + "}") + " : " +
         out + "\n  return %y \"y\"\n}\n";
}

/// A reduction over `dims` of [37,129,65] and the output shape it gives.
struct DimsCase {
  const char* attrs;
  const char* shape;  ///< output shape, without the dtype
};

// Inner, outer, middle, multiple, all (explicit and default), negative; keepdim both ways.
const std::vector<DimsCase> kDims = {
    {"dims=[2]", "[37,129]"},  {"dims=[2], keepdim=1", "[37,129,1]"},
    {"dims=[0]", "[129,65]"},  {"dims=[0], keepdim=1", "[1,129,65]"},
    {"dims=[1]", "[37,65]"},   {"dims=[1], keepdim=1", "[37,1,65]"},
    {"dims=[0,2]", "[129]"},   {"dims=[0,2], keepdim=1", "[1,129,1]"},
    {"dims=[1,2]", "[37]"},    {"dims=[0,1]", "[65]"},
    {"dims=[-1]", "[37,129]"}, {"dims=[0,1,2]", "[]"},
    {"keepdim=1", "[1,1,1]"},  {"", "[]"},
};

/// Every case of kDims; the output has `out_dtype` (empty: the input's).
void checkAllDims(const std::string& op, const std::string& dtype, const CheckOptions& o, const std::string& extra = "",
                  const std::string& out_dtype = "") {
  const std::string out = out_dtype.empty() ? dtype : out_dtype;
  for (const DimsCase& c : kDims) {
    std::string attrs = c.attrs;
    if (!extra.empty()) attrs += (attrs.empty() ? "" : ", ") + extra;
    SCOPED_TRACE(op + " " + dtype + " {" + attrs + "}");
    expectMatchesCpu(unaryIr(op, dtype + "[37,129,65]", attrs, out + c.shape), o);
  }
}

// Sums and means of positive values (in (0.1, 2)): an output that cancels
// to nearly zero would turn the fp32-vs-double summation difference into a
// large relative error without any kernel being wrong.
TEST(CudaReductionKernels, SumOverEveryKindOfDims) {
  KILN_REQUIRE_GPU();
  checkAllDims("sum", "f32", {.tol = 1e-5, .positive = true});
  checkAllDims("sum", "f64", {.tol = 1e-12, .positive = true});
  checkAllDims("sum", "bf16", {.tol = 1e-2, .positive = true});
  checkAllDims("sum", "f16", {.tol = 1e-2, .positive = true});
  // Signed values over slices of at most 129 (outputs relative to the largest).
  expectMatchesCpu(unaryIr("sum", "f32[37,129,65]", "dims=[1]", "f32[37,65]"), {.tol = 1e-5});
  expectMatchesCpu(unaryIr("sum", "f32[37,129,65]", "dims=[0,2]", "f32[129]"), {.tol = 1e-5});
}

TEST(CudaReductionKernels, MeanOverEveryKindOfDims) {
  KILN_REQUIRE_GPU();
  checkAllDims("mean", "f32", {.tol = 1e-5, .positive = true});
  checkAllDims("mean", "f64", {.tol = 1e-12, .positive = true});
  checkAllDims("mean", "bf16", {.tol = 1e-2, .positive = true});
}

TEST(CudaReductionKernels, AmaxAminOverEveryKindOfDims) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"amax", "amin"}) {
    checkAllDims(op, "f32", {.tol = 0});
    checkAllDims(op, "bf16", {.tol = 0});
    checkAllDims(op, "f16", {.tol = 0});
    checkAllDims(op, "i32", {.tol = 0, .int_bound = 1000});
  }
}

TEST(CudaReductionKernels, VarWithCorrections) {
  KILN_REQUIRE_GPU();
  checkAllDims("var", "f32", {.tol = 1e-5});
  checkAllDims("var", "f32", {.tol = 1e-5}, "correction=0.0");
  checkAllDims("var", "f64", {.tol = 1e-12}, "correction=2.5");
  checkAllDims("var", "bf16", {.tol = 1e-2});
  // Positive values (a mean away from zero).
  expectMatchesCpu(unaryIr("var", "f32[64,999]", "dims=[1]", "f32[64]"), {.tol = 1e-5, .positive = true});
}

TEST(CudaReductionKernels, ProdOverSmallSlices) {
  KILN_REQUIRE_GPU();
  // Positive factors in (0.1, 2) keep products of up to 13 in range.
  const CheckOptions pos{.tol = 1e-5, .positive = true};
  expectMatchesCpu(unaryIr("prod", "f32[7,13,5]", "dims=[1]", "f32[7,5]"), pos);
  expectMatchesCpu(unaryIr("prod", "f32[7,13,5]", "dims=[2], keepdim=1", "f32[7,13,1]"), pos);
  expectMatchesCpu(unaryIr("prod", "f32[7,13,5]", "dims=[0]", "f32[13,5]"), pos);
  expectMatchesCpu(unaryIr("prod", "f32[7,3,5]", "dims=[0,2]", "f32[3]"), pos);
  expectMatchesCpu(unaryIr("prod", "f64[7,13,5]", "dims=[1]", "f64[7,5]"), {.tol = 1e-12, .positive = true});
  expectMatchesCpu(unaryIr("prod", "bf16[7,13,5]", "dims=[1]", "bf16[7,5]"), {.tol = 1e-2, .positive = true});
  expectMatchesCpu(unaryIr("prod", "i64[7,13,5]", "dims=[1]", "i64[7,5]"), {.tol = 0, .int_bound = 3});
  expectMatchesCpu(unaryIr("prod", "i32[40]", "", "i64[]"), {.tol = 0, .int_bound = 3});
}

TEST(CudaReductionKernels, IntegerAndBoolSumsGiveInt64) {
  KILN_REQUIRE_GPU();
  checkAllDims("sum", "i32", {.tol = 0, .int_bound = 1000}, "", "i64");
  expectMatchesCpu(unaryIr("sum", "i64[37,129,65]", "dims=[0,2]", "i64[129]"), {.tol = 0, .int_bound = 1 << 20});
  expectMatchesCpu(unaryIr("sum", "u8[37,129,65]", "dims=[1]", "i64[37,65]"), {.tol = 0, .int_bound = 256});
  expectMatchesCpu(unaryIr("sum", "i8[37,129,65]", "dims=[2]", "i64[37,129]"), {.tol = 0, .int_bound = 100});
  expectMatchesCpu(unaryIr("sum", "bool[37,129,65]", "dims=[0,2]", "i64[129]"), {.tol = 0});
  expectMatchesCpu(unaryIr("sum", "bool[1000003]", "", "i64[]"), {.tol = 0});
  expectMatchesCpu(unaryIr("amax", "bool[37,129]", "dims=[1]", "bool[37]"), {.tol = 0});
  expectMatchesCpu(unaryIr("amin", "i16[37,129]", "dims=[0]", "i16[129]"), {.tol = 0, .int_bound = 30000});
}

// 1000003 elements: split over hundreds of blocks, the partials combined by
// a second kernel. Positive values keep the sum far from zero, so the
// relative bound measures the summation error.
TEST(CudaReductionKernels, FullReductionOfAMillionElements) {
  KILN_REQUIRE_GPU();
  const CheckOptions pos{.tol = 1e-5, .positive = true};
  expectMatchesCpu(unaryIr("sum", "f32[1000003]", "", "f32[]"), pos);
  expectMatchesCpu(unaryIr("mean", "f32[1000003]", "", "f32[]"), pos);
  expectMatchesCpu(unaryIr("var", "f32[1000003]", "", "f32[]"), {.tol = 1e-5});
  expectMatchesCpu(unaryIr("amax", "f32[1000003]", "", "f32[]"), {.tol = 0});
  expectMatchesCpu(unaryIr("amin", "f32[1000003]", "", "f32[]"), {.tol = 0});
  expectMatchesCpu(unaryIr("sum", "f32[1000003]", "dims=[0], keepdim=1", "f32[1]"), pos);
  expectMatchesCpu(unaryIr("sum", "bf16[1000003]", "", "bf16[]"), {.tol = 1e-2, .positive = true});
  expectMatchesCpu(unaryIr("sum", "f64[1000003]", "", "f64[]"), {.tol = 1e-12, .positive = true});
  expectMatchesCpu(unaryIr("mean", "f32[3,1000003]", "dims=[1]", "f32[3]"), pos);
  expectMatchesCpu(unaryIr("sum", "f32[8192,768]", "dims=[0]", "f32[768]"), {.tol = 1e-5});
  expectMatchesCpu(unaryIr("sum", "f32[1000003,3]", "dims=[0]", "f32[3]"), pos);
}

// Same shape, same bits: no atomics, a fixed combination order.
TEST(CudaReductionKernels, SumsAreDeterministic) {
  KILN_REQUIRE_GPU();
  auto g = parseGraph(unaryIr("sum", "f32[1000003]", "", "f32[]"), "test");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const Node& n = *g->nodes().front();
  const TensorMap in = drawInputs(*g, {});
  const std::vector<Tensor> args = {in.at("x")};
  auto a = runNode(n, args);
  auto b = runNode(n, args);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->outputs[0].at(0), b->outputs[0].at(0));
}

TEST(CudaReductionKernels, ArgmaxArgminAlongEachDim) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"argmax", "argmin"}) {
    SCOPED_TRACE(op);
    for (const char* dt : {"f32", "bf16", "f16", "f64"}) {
      const std::string t = dt;
      expectMatchesCpu(unaryIr(op, t + "[37,129,65]", "dim=2", "i64[37,129]"), {.tol = 0});
      expectMatchesCpu(unaryIr(op, t + "[37,129,65]", "dim=-1, keepdim=1", "i64[37,129,1]"), {.tol = 0});
      expectMatchesCpu(unaryIr(op, t + "[37,129,65]", "dim=1", "i64[37,65]"), {.tol = 0});
      expectMatchesCpu(unaryIr(op, t + "[37,129,65]", "dim=0, keepdim=1", "i64[1,129,65]"), {.tol = 0});
    }
    // Many ties: the first index wins.
    expectMatchesCpu(unaryIr(op, "i32[37,129,65]", "dim=1", "i64[37,65]"), {.tol = 0, .int_bound = 5});
    expectMatchesCpu(unaryIr(op, "u8[37,1000]", "dim=1", "i64[37]"), {.tol = 0, .int_bound = 7});
    expectMatchesCpu(unaryIr(op, "bool[37,1000]", "dim=1", "i64[37]"), {.tol = 0});
    // One long row: split over blocks.
    expectMatchesCpu(unaryIr(op, "f32[1000003]", "dim=0", "i64[]"), {.tol = 0});
    expectMatchesCpu(unaryIr(op, "i32[1000003]", "dim=0", "i64[]"), {.tol = 0, .int_bound = 100});
    expectMatchesCpu(unaryIr(op, "f32[]", "dim=0", "i64[]"), {.tol = 0});
  }
}

const char* kProdBackward = R"(graph g(%g: f32[7,5] data, %x: f32[7,13,5] data, %y: f32[7,5] data) {
  %d = prod_backward(%g, %x, %y) {dims=[1]} : f32[7,13,5]
  return %d "dx"
})";

TEST(CudaReductionKernels, ProdBackwardWithoutZeros) {
  KILN_REQUIRE_GPU();
  expectMatchesCpu(kProdBackward, {.tol = 1e-5, .positive = true});
  expectMatchesCpu(R"(graph g(%g: bf16[1,13,1] data, %x: bf16[7,13,5] data, %y: bf16[1,13,1] data) {
  %d = prod_backward(%g, %x, %y) {dims=[0,2], keepdim=1} : bf16[7,13,5]
  return %d "dx"
})",
                   {.tol = 1e-2, .positive = true});
  expectMatchesCpu(R"(graph g(%g: f64[] data, %x: f64[4,6] data, %y: f64[] data) {
  %d = prod_backward(%g, %x, %y) : f64[4,6]
  return %d "dx"
})",
                   {.tol = 1e-12, .positive = true});
}

// Slices with no zero, one zero and two zeros: only a lone zero gets the
// product of the others, two zeros zero the whole slice.
TEST(CudaReductionKernels, ProdBackwardWithZeros) {
  KILN_REQUIRE_GPU();
  auto g = parseGraph(kProdBackward, "test");
  ASSERT_TRUE(g.ok()) << g.error().message;
  TensorMap in = drawInputs(*g, {.positive = true});
  Tensor& x = in.at("x");  // [7, 13, 5], reduced over dim 1
  auto at = [](int64_t a, int64_t b, int64_t c) { return (a * 13 + b) * 5 + c; };
  x.set(at(1, 4, 0), 0.0);  // slice (1, 0): one zero
  x.set(at(2, 0, 3), 0.0);  // slice (2, 3): two zeros
  x.set(at(2, 12, 3), 0.0);
  x.set(at(6, 12, 4), 0.0);  // slice (6, 4): one zero, last element
  expectMatchesCpuOn(kProdBackward, in, {.tol = 1e-5});
}

}  // namespace
}  // namespace kiln::cuda::test
