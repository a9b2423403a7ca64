// CPU reference kernels of the shape family against libtorch: reshape (which
// aliases its input), permute, expand, slice, select, flip, cat, split, roll,
// repeat, pad in all four modes, index and gather (and their out-of-range
// errors), triu/tril, full and arange. Layout ops must match exactly.
#include <limits>

#include "backend/kernel.h"
#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;
namespace F = torch::nn::functional;
using torch::indexing::Slice;

void check(const std::string& op, const std::vector<torch::Tensor>& inputs, const torch::Tensor& expected,
           const AttrMap& attrs = {}, double tol = 0) {
  auto out = runOp(op, inputs, attrs);
  ASSERT_EQ(out.size(), 1u) << op;
  expectClose(out[0], expected, tol, op);
}

/// The error message of running `op`, or "" when it succeeds.
std::string runOpError(const std::string& op, const std::vector<torch::Tensor>& inputs, const AttrMap& attrs = {}) {
  Graph g;
  std::vector<Value*> ins;
  TensorMap bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = fromTorch(inputs[i]);
    ins.push_back(g.addInput("input" + std::to_string(i), t.type(), ValueRole::Data));
    bound["input" + std::to_string(i)] = t;
  }
  g.addOutput(g.add(op, ins, attrs), "out");
  auto ex = CpuExecutor::create(g);
  if (!ex.ok()) return ex.error().message;
  auto outs = ex->run(bound);
  return outs.ok() ? "" : outs.error().message;
}

TEST(KernelsShapeView, ReshapeAliasesItsInput) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, {2, 6}}, ValueRole::Data);
  Node* n = g.create("reshape", {x}, {{"shape", Ints{3, -1}}});
  const KernelDef* k = KernelRegistry::cpu().select(*n);
  ASSERT_NE(k, nullptr);
  std::vector<Tensor> ins = {Tensor::fromFloats({2, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})};
  std::vector<Tensor> outs(1);
  KernelContext ctx;
  k->fn(*n, ins, outs, ctx);
  EXPECT_EQ(outs[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(outs[0].raw(), ins[0].raw());
  auto t = torch::randn({2, 3, 4});
  check("reshape", {t}, t.reshape({4, -1}), {{"shape", Ints{4, -1}}});
  check("reshape", {t}, t.reshape({24}), {{"shape", Ints{24}}});
}

TEST(KernelsShapeView, PermuteExpandSelectFlip) {
  torch::manual_seed(30);
  auto x = torch::randn({2, 3, 4, 5});
  check("permute", {x}, x.permute({3, 1, 0, 2}), {{"dims", Ints{3, 1, 0, 2}}});
  check("permute", {x}, x.permute({-1, -2, 0, 1}), {{"dims", Ints{-1, -2, 0, 1}}});
  check("permute", {torch::tensor(2.0)}, torch::tensor(2.0), {{"dims", Ints{}}});
  auto c = torch::randn({3, 1});
  check("expand", {c}, c.expand({2, 3, 4}), {{"shape", Ints{2, 3, 4}}});
  check("expand", {c}, c.expand({-1, 5}), {{"shape", Ints{-1, 5}}});
  check("expand", {torch::tensor(1.5)}, torch::tensor(1.5).expand({2, 2}), {{"shape", Ints{2, 2}}});
  for (int64_t idx : {0, 2, -1, -3}) {
    AttrMap a = {{"dim", int64_t{1}}, {"index", idx}};
    check("select", {x}, x.select(1, idx), a);
  }
  check("select", {x}, x.select(-1, 4), {{"dim", int64_t{-1}}, {"index", int64_t{4}}});
  check("flip", {x}, x.flip({0, 3}), {{"dims", Ints{0, 3}}});
  check("flip", {x}, x.flip({-2}), {{"dims", Ints{-2}}});
  check("flip", {x}, x.flip({0, 1, 2, 3}), {{"dims", Ints{0, 1, 2, 3}}});
  auto i = torch::randint(0, 100, {3, 4}, torch::kInt64);
  check("flip", {i}, i.flip({1}), {{"dims", Ints{1}}});
  check("permute", {i.to(torch::kBool)}, i.to(torch::kBool).t(), {{"dims", Ints{1, 0}}});
  auto big = torch::randn({64, 32, 32});
  check("permute", {big}, big.permute({2, 0, 1}), {{"dims", Ints{2, 0, 1}}});
}

TEST(KernelsShapeView, SliceBoundsAndSteps) {
  torch::manual_seed(31);
  auto x = torch::randn({4, 10, 3});
  struct Case {
    int64_t dim, start, end, step;
  };
  const int64_t kEnd = std::numeric_limits<int64_t>::max();
  const std::vector<Case> cases = {{1, 0, kEnd, 1}, {1, 2, 7, 1},   {1, -3, kEnd, 1}, {1, -100, 4, 1},
                                   {1, 3, 100, 2},  {1, 1, -1, 3},  {1, 8, 2, 1},     {0, 1, 3, 1},
                                   {-1, 0, 3, 2},   {1, -4, -1, 2}, {1, 20, 30, 1},   {0, kEnd, kEnd, 1}};
  for (const Case& c : cases) {
    AttrMap a = {{"dim", c.dim}, {"start", c.start}, {"end", c.end}, {"step", c.step}};
    auto expected = x.slice(c.dim, c.start, c.end, c.step);
    check("slice", {x}, expected, a);
  }
  auto i = torch::randint(0, 9, {12}, torch::kInt8);
  check("slice", {i}, i.slice(0, 1, 12, 4),
        {{"dim", int64_t{0}}, {"start", int64_t{1}}, {"end", int64_t{12}}, {"step", int64_t{4}}});
}

TEST(KernelsShapeLayout, CatAndSplit) {
  torch::manual_seed(32);
  auto a = torch::randn({2, 3, 4}), b = torch::randn({2, 1, 4}), c = torch::randn({2, 0, 4});
  check("cat", {a, b, c}, torch::cat({a, b, c}, 1), {{"dim", int64_t{1}}});
  check("cat", {a, a}, torch::cat({a, a}, -1), {{"dim", int64_t{-1}}});
  check("cat", {a, b.expand({2, 3, 4}).contiguous()}, torch::cat({a, b.expand({2, 3, 4})}, 0), {{"dim", int64_t{0}}});
  auto i = torch::randint(0, 9, {2, 2, 4}, torch::kInt64);
  check("cat", {a, i}, torch::cat({a, i}, 1), {{"dim", int64_t{1}}});  // promotes to f32
  auto x = torch::randn({3, 7, 2});
  auto outs = runOp("split", {x}, {{"dim", int64_t{1}}, {"sizes", Ints{2, 0, 4, 1}}});
  auto expected = x.split_with_sizes({2, 0, 4, 1}, 1);
  ASSERT_EQ(outs.size(), 4u);
  for (size_t k = 0; k < 4; ++k) expectClose(outs[k], expected[k], 0, "split " + std::to_string(k));
  outs = runOp("split", {x}, {{"dim", int64_t{-1}}, {"sizes", Ints{1, 1}}});
  ASSERT_EQ(outs.size(), 2u);
  expectClose(outs[1], x.slice(2, 1, 2), 0, "split last dim");
}

TEST(KernelsShapeLayout, RollWithAndWithoutDims) {
  torch::manual_seed(33);
  auto x = torch::randn({3, 4, 5});
  check("roll", {x}, x.roll({2}, {1}), {{"shifts", Ints{2}}, {"dims", Ints{1}}});
  check("roll", {x}, x.roll({-1}, {-1}), {{"shifts", Ints{-1}}, {"dims", Ints{-1}}});
  check("roll", {x}, x.roll({7, -9}, {0, 2}), {{"shifts", Ints{7, -9}}, {"dims", Ints{0, 2}}});
  check("roll", {x}, x.roll({3}), {{"shifts", Ints{3}}});
  check("roll", {x}, x.roll({-61}), {{"shifts", Ints{-61}}});
  auto i = torch::arange(10, torch::kInt32);
  check("roll", {i}, i.roll({4}), {{"shifts", Ints{4}}});
  check("roll", {torch::zeros({0, 2})}, torch::zeros({0, 2}), {{"shifts", Ints{1}}, {"dims", Ints{0}}});
}

TEST(KernelsShapeLayout, RepeatWithExtraLeadingDims) {
  torch::manual_seed(34);
  auto x = torch::randn({2, 3});
  check("repeat", {x}, x.repeat({2, 2}), {{"repeats", Ints{2, 2}}});
  check("repeat", {x}, x.repeat({3, 1, 2}), {{"repeats", Ints{3, 1, 2}}});
  check("repeat", {x}, x.repeat({2, 1, 1, 1}), {{"repeats", Ints{2, 1, 1, 1}}});
  check("repeat", {x}, x.repeat({1, 0}), {{"repeats", Ints{1, 0}}});
  auto s = torch::tensor(4, torch::kInt64);
  check("repeat", {s}, s.repeat({3}), {{"repeats", Ints{3}}});
}

TEST(KernelsShapeLayout, PadAllModes) {
  torch::manual_seed(35);
  auto x = torch::randn({2, 3, 5, 6});
  auto pad = [&](const Ints& pads, const std::string& mode, double value, const torch::Tensor& expected,
                 const torch::Tensor& in) {
    check("pad", {in}, expected, {{"pads", pads}, {"mode", mode}, {"value", value}});
  };
  pad({1, 2}, "constant", 0.0, F::pad(x, F::PadFuncOptions({1, 2})), x);
  pad({1, 2, 3, 0}, "constant", -1.5, F::pad(x, F::PadFuncOptions({1, 2, 3, 0}).value(-1.5)), x);
  pad({-1, 2, 0, 0, 1, 1}, "constant", 0.0, F::pad(x, F::PadFuncOptions({-1, 2, 0, 0, 1, 1})), x);
  pad({2, 1, 1, 3}, "reflect", 0.0, F::pad(x, F::PadFuncOptions({2, 1, 1, 3}).mode(torch::kReflect)), x);
  pad({2, 1, 1, 3}, "replicate", 0.0, F::pad(x, F::PadFuncOptions({2, 1, 1, 3}).mode(torch::kReplicate)), x);
  pad({2, 1, 1, 3}, "circular", 0.0, F::pad(x, F::PadFuncOptions({2, 1, 1, 3}).mode(torch::kCircular)), x);
  auto x3 = x[0];
  pad({4, 5}, "reflect", 0.0, F::pad(x3, F::PadFuncOptions({4, 5}).mode(torch::kReflect)), x3);
  pad({6, 6}, "circular", 0.0, F::pad(x3, F::PadFuncOptions({6, 6}).mode(torch::kCircular)), x3);
  pad({7, 0}, "replicate", 0.0, F::pad(x3, F::PadFuncOptions({7, 0}).mode(torch::kReplicate)), x3);
  auto i = torch::randint(0, 9, {3, 4}, torch::kInt64);
  pad({1, 1, 1, 1}, "constant", 7.0, F::pad(i, F::PadFuncOptions({1, 1, 1, 1}).value(7)), i);
  EXPECT_NE(runOpError("pad", {x3}, {{"pads", Ints{6, 0}}, {"mode", std::string("reflect")}}).find("reflect"),
            std::string::npos);
}

TEST(KernelsShapeLayout, TriangularMasks) {
  torch::manual_seed(36);
  auto x = torch::randn({2, 4, 5});
  for (int64_t k : {-2, -1, 0, 1, 3, 9}) {
    check("triu", {x}, x.triu(k), {{"diagonal", k}});
    check("tril", {x}, x.tril(k), {{"diagonal", k}});
  }
  auto i = torch::randint(1, 9, {6, 3}, torch::kInt32);
  check("triu", {i}, i.triu(), {});
  check("tril", {i}, i.tril(-1), {{"diagonal", int64_t{-1}}});
}

TEST(KernelsShapeIndex, IndexNegativeAndMultiDim) {
  torch::manual_seed(37);
  auto x = torch::randn({4, 5, 6});
  auto idx = torch::tensor({{0, -1, 2}, {-5, 4, 1}}, torch::kInt64);
  using torch::indexing::Slice;
  check("index", {x, idx}, x.index({Slice(), idx}), {{"dim", int64_t{1}}});
  check("index", {x, idx.clamp(-4, 3)}, x.index({idx.clamp(-4, 3)}), {{"dim", int64_t{0}}});
  auto i32 = torch::tensor({5, 0, -6}, torch::kInt32);
  check("index", {x, i32}, x.index({Slice(), Slice(), i32.to(torch::kInt64)}), {{"dim", int64_t{-1}}});
  auto s = torch::tensor(3, torch::kInt64);  // a 0-d index drops the dim
  check("index", {x, s}, x.select(2, 3), {{"dim", int64_t{2}}});
  auto empty = torch::zeros({0}, torch::kInt64);
  check("index", {x, empty}, x.index_select(1, empty), {{"dim", int64_t{1}}});
  auto words = torch::randint(0, 1000, {8, 16}, torch::kInt64);
  auto table = torch::randn({1000, 32});
  check("index", {table, words}, F::embedding(words, table), {{"dim", int64_t{0}}});
}

TEST(KernelsShapeIndex, GatherAlongEachDim) {
  torch::manual_seed(38);
  auto x = torch::randn({4, 5, 6});
  for (int64_t dim : {0, 1, 2, -1}) {
    int64_t size = x.size(dim);
    auto idx = torch::randint(0, size, {3, 5, 4}, torch::kInt64);
    check("gather", {x, idx}, torch::gather(x, dim, idx), {{"dim", dim}});
  }
  auto i = torch::randint(0, 9, {3, 4}, torch::kInt64);
  auto idx = torch::randint(0, 4, {3, 2}, torch::kInt64);
  check("gather", {i, idx}, torch::gather(i, 1, idx), {{"dim", int64_t{1}}});
}

TEST(KernelsShapeIndex, OutOfRangeIndicesAreErrors) {
  auto x = torch::randn({4, 5});
  std::string e = runOpError("index", {x, torch::tensor({1, 5}, torch::kInt64)}, {{"dim", int64_t{1}}});
  EXPECT_NE(e.find("index 5 is out of range for dimension 1 of size 5"), std::string::npos) << e;
  e = runOpError("index", {x, torch::tensor({-6}, torch::kInt64)}, {{"dim", int64_t{1}}});
  EXPECT_NE(e.find("index -6 is out of range"), std::string::npos) << e;
  e = runOpError("gather", {x, torch::tensor({{0, 4}}, torch::kInt64)}, {{"dim", int64_t{0}}});
  EXPECT_NE(e.find("index 4 is out of range for dimension 0 of size 4"), std::string::npos) << e;
  e = runOpError("gather", {x, torch::tensor({{0, -1}}, torch::kInt64)}, {{"dim", int64_t{1}}});
  EXPECT_NE(e.find("index -1 is out of range"), std::string::npos) << e;
  EXPECT_NE(e.find("gather"), std::string::npos) << e;  // names the node
}

TEST(KernelsShapeSource, FullAndArange) {
  check("full", {}, torch::full({2, 3}, 1.25), {{"shape", Ints{2, 3}}, {"value", 1.25}});
  check("full", {}, torch::full({4}, 2.7).to(torch::kInt64),
        {{"shape", Ints{4}}, {"value", 2.7}, {"dtype", DType::I64}});
  check("full", {}, torch::full({2}, true), {{"shape", Ints{2}}, {"value", 0.5}, {"dtype", DType::Bool}});
  check("full", {}, torch::full({}, -3.0, torch::kFloat64),
        {{"shape", Ints{}}, {"value", -3.0}, {"dtype", DType::F64}});
  check("full", {}, torch::full({0, 2}, 1.0), {{"shape", Ints{0, 2}}, {"value", 1.0}});
  check("full", {}, torch::full({3}, -1e30).to(torch::kBFloat16),
        {{"shape", Ints{3}}, {"value", -1e30}, {"dtype", DType::BF16}});
  auto ar = [](double start, double end, double step, DType dt, const torch::Tensor& expected) {
    check("arange", {}, expected, {{"start", start}, {"end", end}, {"step", step}, {"dtype", dt}});
  };
  ar(0, 10, 1, DType::I64, torch::arange(10));
  ar(2, 11, 3, DType::I64, torch::arange(2, 11, 3));
  ar(10, 0, -3, DType::I32, torch::arange(10, 0, -3, torch::kInt32));
  ar(0, 1, 0.1, DType::F32, torch::arange(0.0, 1.0, 0.1));
  ar(-1, 1.05, 0.25, DType::F64, torch::arange(-1.0, 1.05, 0.25, torch::kFloat64));
  ar(0.5, 3.3, 0.7, DType::F32, torch::arange(0.5, 3.3, 0.7));
  ar(5, 5, 1, DType::F32, torch::arange(5.0, 5.0, 1.0));
}

}  // namespace
}  // namespace kiln::testing
