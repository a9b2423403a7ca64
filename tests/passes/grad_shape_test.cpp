// Gradient rules of the shape family (core/ops/shape_grad.cpp): finite
// differences in double precision for every op and attribute variant, the
// backward ops' own rules, f32 gradients against values computed with
// PyTorch 1.13 autograd (duplicate and negative indices, pad modes), and the
// backward ops' errors.
#include <cmath>

#include "backend/cpu/cpu_executor.h"
#include "passes/autodiff.h"
#include "tests/passes/grad_check.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

GradCase unary(const char* op, AttrMap attrs, Shape s) {
  return {.op = op, .attrs = std::move(attrs), .inputs = {f64(s)}};
}

TEST(GradShape, Reshape) {
  EXPECT_TRUE(checkGrad(unary("reshape", {{"shape", Ints{2, 3, 4}}}, {4, 6})));
  EXPECT_TRUE(checkGrad(unary("reshape", {{"shape", Ints{-1}}}, {2, 3})));
  EXPECT_TRUE(checkGrad(unary("reshape", {{"shape", Ints{}}}, {1, 1})));
}

TEST(GradShape, Permute) {
  EXPECT_TRUE(checkGrad(unary("permute", {{"dims", Ints{2, 0, 1}}}, {2, 3, 4})));
  EXPECT_TRUE(checkGrad(unary("permute", {{"dims", Ints{-1, 0, -2}}}, {2, 3, 4})));
}

TEST(GradShape, Expand) {
  EXPECT_TRUE(checkGrad(unary("expand", {{"shape", Ints{2, 3, 4}}}, {3, 1})));
  EXPECT_TRUE(checkGrad(unary("expand", {{"shape", Ints{3, -1}}}, {1, 4})));
  EXPECT_TRUE(checkGrad(unary("expand", {{"shape", Ints{2, 3}}}, {})));
}

TEST(GradShape, Slice) {
  const Shape s = {3, 7};
  EXPECT_TRUE(checkGrad(unary("slice", {{"dim", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{6}}}, s)));
  EXPECT_TRUE(checkGrad(unary("slice", {{"dim", int64_t{-1}}, {"start", int64_t{1}}, {"step", int64_t{2}}}, s)));
  EXPECT_TRUE(checkGrad(
      unary("slice", {{"dim", int64_t{1}}, {"start", int64_t{-6}}, {"end", int64_t{-1}}, {"step", int64_t{3}}}, s)));
  EXPECT_TRUE(checkGrad(unary("slice", {{"dim", int64_t{0}}, {"start", int64_t{-2}}, {"end", int64_t{100}}}, s)));
  // Empty slice: the input's gradient is all zeros.
  EXPECT_TRUE(checkGrad(unary("slice", {{"dim", int64_t{0}}, {"start", int64_t{2}}, {"end", int64_t{1}}}, s)));
}

TEST(GradShape, Select) {
  EXPECT_TRUE(checkGrad(unary("select", {{"dim", int64_t{0}}, {"index", int64_t{1}}}, {3, 4})));
  EXPECT_TRUE(checkGrad(unary("select", {{"dim", int64_t{-1}}, {"index", int64_t{-1}}}, {2, 3, 4})));
  EXPECT_TRUE(checkGrad(unary("select", {{"dim", int64_t{1}}, {"index", int64_t{2}}}, {2, 3, 4})));
}

TEST(GradShape, Cat) {
  EXPECT_TRUE(
      checkGrad({.op = "cat", .attrs = {{"dim", int64_t{1}}}, .inputs = {f64({2, 3}), f64({2, 1}), f64({2, 2})}}));
  // The middle input needs no gradient: the others still get theirs.
  EXPECT_TRUE(checkGrad({.op = "cat",
                         .attrs = {{"dim", int64_t{-1}}},
                         .inputs = {f64({2, 2, 3}), f64({2, 2, 2}), f64({2, 2, 1})},
                         .no_grad = {1}}));
  // A non-floating input (no gradient) is promoted to the output dtype.
  EXPECT_TRUE(checkGrad({.op = "cat",
                         .attrs = {{"dim", int64_t{0}}},
                         .inputs = {f64({2, 3}), {DType::I64, {1, 3}}},
                         .fixed = {{1, Tensor::fromInt64s({1, 3}, {1, 2, 3})}}}));
}

TEST(GradShape, Split) {
  const AttrMap attrs = {{"dim", int64_t{1}}, {"sizes", Ints{1, 3, 2}}};
  EXPECT_TRUE(checkGrad({.op = "split", .attrs = attrs, .inputs = {f64({2, 6})}}));
  // A piece without gradient contributes zeros.
  EXPECT_TRUE(checkGrad({.op = "split", .attrs = attrs, .inputs = {f64({2, 6})}, .loss_outputs = {0, 2}}));
  // Only one piece with a gradient (placed by slice_backward).
  EXPECT_TRUE(checkGrad({.op = "split", .attrs = attrs, .inputs = {f64({2, 6})}, .loss_outputs = {1}}));
  // An empty piece, negative dim.
  EXPECT_TRUE(
      checkGrad({.op = "split", .attrs = {{"dim", int64_t{-2}}, {"sizes", Ints{2, 0, 2}}}, .inputs = {f64({4, 2})}}));
}

TEST(GradShape, Roll) {
  EXPECT_TRUE(checkGrad(unary("roll", {{"shifts", Ints{1, -2}}, {"dims", Ints{0, -1}}}, {3, 4})));
  EXPECT_TRUE(checkGrad(unary("roll", {{"shifts", Ints{5}}}, {3, 4})));  // flattened
  EXPECT_TRUE(checkGrad(unary("roll", {{"shifts", Ints{7}}, {"dims", Ints{1}}}, {2, 3})));
}

TEST(GradShape, Flip) {
  EXPECT_TRUE(checkGrad(unary("flip", {{"dims", Ints{0, 2}}}, {2, 3, 4})));
  EXPECT_TRUE(checkGrad(unary("flip", {{"dims", Ints{-1}}}, {3, 4})));
}

TEST(GradShape, Repeat) {
  EXPECT_TRUE(checkGrad(unary("repeat", {{"repeats", Ints{2, 3}}}, {2, 3})));
  EXPECT_TRUE(checkGrad(unary("repeat", {{"repeats", Ints{2, 1, 3}}}, {2, 2})));  // a new leading dim
  EXPECT_TRUE(checkGrad(unary("repeat", {{"repeats", Ints{1, 1}}}, {2, 3})));
  EXPECT_TRUE(checkGrad(unary("repeat", {{"repeats", Ints{0, 2}}}, {2, 3})));  // empty output
}

AttrMap padAttrs(Ints pads, const char* mode) {
  return {{"pads", std::move(pads)}, {"mode", std::string(mode)}};
}

TEST(GradShape, PadConstant) {
  EXPECT_TRUE(checkGrad(unary("pad", {{"pads", Ints{1, 2}}, {"value", 3.0}}, {2, 3})));
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({1, 2, 0, 1}, "constant"), {2, 3, 4})));
  // Negative pads crop; the gradient is padded back with zeros.
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({-1, 2, 1, -2}, "constant"), {2, 3, 4})));
}

TEST(GradShape, PadReflect) {
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({2, 1}, "reflect"), {2, 2, 4})));
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({1, 2, 2, 1}, "reflect"), {1, 2, 3, 4})));
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({-1, 2}, "reflect"), {2, 4})));
}

TEST(GradShape, PadReplicate) {
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({3, 1, 0, 2}, "replicate"), {1, 2, 3, 2})));
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({2, -1}, "replicate"), {2, 4})));
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({1, 1, 1, 1, 1, 1}, "replicate"), {2, 2, 2})));
}

TEST(GradShape, PadCircular) {
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({2, 3}, "circular"), {2, 3})));
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({1, 0, 2, 2}, "circular"), {1, 2, 2, 3})));
  EXPECT_TRUE(checkGrad(unary("pad", padAttrs({-1, 2}, "circular"), {2, 4})));
}

GradCase withIndex(const char* op, int64_t dim, Shape x, Tensor idx) {
  TensorType it = idx.type();
  return {.op = op, .attrs = {{"dim", dim}}, .inputs = {f64(std::move(x)), it}, .fixed = {{1, std::move(idx)}}};
}

TEST(GradShape, Index) {
  // Duplicate and negative indices accumulate onto the same rows.
  EXPECT_TRUE(checkGrad(withIndex("index", 0, {4, 3}, Tensor::fromInt64s({2, 3}, {0, -1, 3, 0, 0, 2}))));
  EXPECT_TRUE(checkGrad(withIndex("index", 1, {2, 3, 2}, Tensor::fromInt64s({4}, {2, -1, 0, 2}))));
  EXPECT_TRUE(checkGrad(withIndex("index", -1, {2, 3}, Tensor::fromInt64s({2, 2}, {1, 1, -3, 1}))));
  EXPECT_TRUE(checkGrad(withIndex("index", 0, {3, 2}, Tensor::fromInt64s({0}, {}))));
  // An int32 index.
  EXPECT_TRUE(checkGrad(withIndex("index", 0, {3, 2}, Tensor::fromInt64s({3}, {2, 2, -1}).to(DType::I32))));
}

TEST(GradShape, Gather) {
  EXPECT_TRUE(checkGrad(withIndex("gather", 1, {3, 4}, Tensor::fromInt64s({3, 2}, {0, 0, 3, 1, 2, 2}))));
  // Index smaller than the input outside dim.
  EXPECT_TRUE(checkGrad(withIndex("gather", 0, {4, 3}, Tensor::fromInt64s({2, 2}, {3, 3, 0, 3}))));
  Tensor i3 = Tensor::fromInt64s({2, 2, 4}, {0, 2, 2, 1, 1, 1, 0, 0, 2, 1, 0, 2, 0, 0, 0, 0});
  EXPECT_TRUE(checkGrad(withIndex("gather", -1, {2, 2, 3}, i3)));  // index larger than x along dim
}

TEST(GradShape, Triangular) {
  for (const char* op : {"triu", "tril"})
    for (int64_t k : {0, 1, -1}) EXPECT_TRUE(checkGrad(unary(op, {{"diagonal", k}}, {2, 3, 4}))) << op << " " << k;
}

// ---- the backward ops as ops (second derivatives go through their rules) ------

TEST(GradShape, BackwardOpsDifferentiate) {
  EXPECT_TRUE(checkGrad(
      unary("slice_backward",
            {{"input_shape", Ints{3, 7}}, {"dim", int64_t{1}}, {"start", int64_t{1}}, {"step", int64_t{2}}}, {3, 3})));
  EXPECT_TRUE(checkGrad(
      unary("select_backward", {{"input_shape", Ints{2, 3}}, {"dim", int64_t{-1}}, {"index", int64_t{-2}}}, {2})));
  EXPECT_TRUE(checkGrad(unary(
      "pad_backward", {{"input_shape", Ints{2, 3}}, {"pads", Ints{2, 1}}, {"mode", std::string("reflect")}}, {2, 6})));
  EXPECT_TRUE(checkGrad({.op = "index_add",
                         .attrs = {{"dim", int64_t{1}}},
                         .inputs = {f64({2, 3}), {DType::I64, {4}}, f64({2, 4})},
                         .fixed = {{1, Tensor::fromInt64s({4}, {2, 0, 2, -1})}}}));
  // src larger than the index: its unused elements get zero gradient.
  EXPECT_TRUE(checkGrad({.op = "scatter_add",
                         .attrs = {{"dim", int64_t{0}}},
                         .inputs = {f64({3, 3}), {DType::I64, {2, 2}}, f64({3, 3})},
                         .fixed = {{1, Tensor::fromInt64s({2, 2}, {2, 0, 2, 2})}}}));
  for (const char* reduce : {"prod", "amax", "amin"})
    for (int64_t self : {0, 1})
      EXPECT_TRUE(checkGrad({.op = "scatter_reduce",
                             .attrs = {{"dim", int64_t{1}}, {"reduce", std::string(reduce)}, {"include_self", self}},
                             .inputs = {f64({2, 3}), {DType::I64, {2, 4}}, f64({2, 4})},
                             .fixed = {{1, Tensor::fromInt64s({2, 4}, {2, 0, 2, 2, 1, 1, 0, 2})}}}))
          << reduce << " include_self " << self;
}

// ---- f32 gradients against PyTorch 1.13 autograd --------------------------------
// x = arange(numel) in x's shape, loss = sum(op(x) * w), w = arange(out numel) * 0.5 - 1;
// the expected values are x.grad printed by PyTorch.

std::vector<double> f32Grad(const char* op, AttrMap attrs, Shape x_shape, const Tensor* idx = nullptr) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, x_shape}, ValueRole::Param);
  std::vector<Value*> ins = {x};
  if (idx) ins.push_back(g.addInput("idx", idx->type(), ValueRole::Data));
  Value* y = g.add(op, ins, std::move(attrs));
  Value* w = g.addInput("w", y->type(), ValueRole::Data);
  Value* loss = g.add("sum", {g.add("mul", {y, w})});
  g.addOutput(loss, "loss", OutputRole::Loss);
  auto grads = differentiate(g, loss, {x});
  EXPECT_TRUE(grads.ok()) << grads.error().message;
  if (!grads.ok()) return {};
  g.addOutput((*grads)[0], "grad:x", OutputRole::Gradient);
  TensorMap bound;
  Tensor xt(DType::F32, x_shape), wt(y->type());
  for (int64_t i = 0; i < xt.numel(); ++i) xt.set(i, static_cast<double>(i));
  for (int64_t i = 0; i < wt.numel(); ++i) wt.set(i, static_cast<double>(i) * 0.5 - 1);
  bound["x"] = xt;
  bound["w"] = wt;
  if (idx) bound["idx"] = *idx;
  auto ex = CpuExecutor::create(g);
  EXPECT_TRUE(ex.ok()) << ex.error().message;
  if (!ex.ok()) return {};
  auto out = ex->run(bound);
  EXPECT_TRUE(out.ok()) << out.error().message;
  if (!out.ok()) return {};
  const Tensor& gx = (*out)[1];
  EXPECT_EQ(gx.dtype(), DType::F32);
  std::vector<double> v;
  for (int64_t i = 0; i < gx.numel(); ++i) v.push_back(gx.at(i));
  return v;
}

TEST(GradShape, PadMatchesTorch) {
  using V = std::vector<double>;
  EXPECT_EQ(f32Grad("pad", padAttrs({3, 2}, "reflect"), {1, 2, 5}), (V{0.5, 1, 4.5, 4, 2.5, 5.5, 11, 19.5, 19, 7.5}));
  EXPECT_EQ(f32Grad("pad", padAttrs({2, -1}, "replicate"), {1, 2, 5}), (V{-1.5, 0.5, 1, 1.5, 0, 7.5, 3.5, 4, 4.5, 0}));
  EXPECT_EQ(f32Grad("pad", padAttrs({4, 5}, "circular"), {1, 2, 5}),
            (V{4.5, 4.5, 6, 7.5, 9, 18.5, 25.5, 27, 28.5, 30}));
  EXPECT_EQ(f32Grad("pad", padAttrs({1, 3, 2, 1}, "reflect"), {1, 1, 3, 4}),
            (V{18, 25, 18, 9, 78, 111, 78, 39, 36, 50, 36, 18}));
  EXPECT_EQ(f32Grad("pad", padAttrs({-1, 2, 1, -2}, "constant"), {1, 1, 3, 4}),
            (V{0, 1.5, 2, 2.5, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(GradShape, IndexAndGatherMatchTorch) {
  using V = std::vector<double>;
  Tensor i0 = Tensor::fromInt64s({3, 2}, {0, -1, 3, 0, 0, 0});  // x[idx]
  EXPECT_EQ(f32Grad("index", {{"dim", int64_t{0}}}, {4, 3}, &i0), (V{14, 16, 18, 0, 0, 0, 0, 0, 0, 2.5, 3.5, 4.5}));
  Tensor i1 = Tensor::fromInt64s({4}, {2, -1, 0, 2});  // x[:, idx]
  EXPECT_EQ(f32Grad("index", {{"dim", int64_t{1}}}, {4, 3}, &i1), (V{0, 0, -1, 2, 0, 5, 4, 0, 11, 6, 0, 17}));
  Tensor g1 = Tensor::fromInt64s({3, 2}, {0, 0, 2, 0, 1, 1});
  EXPECT_EQ(f32Grad("gather", {{"dim", int64_t{1}}}, {4, 3}, &g1), (V{-1.5, 0, 0, 0.5, 0, 0, 0, 2.5, 0, 0, 0, 0}));
  Tensor g0 = Tensor::fromInt64s({2, 3}, {3, 3, 0, 3, 1, 3});
  EXPECT_EQ(f32Grad("gather", {{"dim", int64_t{0}}}, {4, 3}, &g0), (V{0, 0, 0, 0, 1, 0, 0, 0, 0, -0.5, -0.5, 1.5}));
}

// ---- large inputs: the multi-threaded paths against a sequential sum --------------

TEST(GradShape, LargeAccumulationsMatchASequentialSum) {
  // index_add over dim 0 with wide rows (split into blocks across threads) and
  // scatter_add over dim 1 with many rows; duplicates everywhere.
  const int64_t rows = 8, cols = 5000, m = 20;
  Graph g;
  Value* base = g.addInput("base", {DType::F32, {rows, cols}}, ValueRole::Data);
  Value* idx = g.addInput("idx", {DType::I64, {m}}, ValueRole::Data);
  Value* src = g.addInput("src", {DType::F32, {m, cols}}, ValueRole::Data);
  Value* sidx = g.addInput("sidx", {DType::I64, {cols, m}}, ValueRole::Data);
  Value* ssrc = g.addInput("ssrc", {DType::F32, {cols, m}}, ValueRole::Data);
  Value* sbase = g.addInput("sbase", {DType::F32, {cols, rows}}, ValueRole::Data);
  g.addOutput(g.add("index_add", {base, idx, src}, {{"dim", int64_t{0}}}), "ia");
  g.addOutput(g.add("scatter_add", {sbase, sidx, ssrc}, {{"dim", int64_t{1}}}), "sa");
  Tensor tb(DType::F32, {rows, cols}), ti(DType::I64, {m}), ts(DType::F32, {m, cols});
  Tensor tsi(DType::I64, {cols, m}), tss(DType::F32, {cols, m}), tsb(DType::F32, {cols, rows});
  for (int64_t i = 0; i < tb.numel(); ++i) tb.set(i, static_cast<double>(i % 7));
  for (int64_t j = 0; j < m; ++j) ti.set(j, static_cast<double>((j * 5) % rows) - (j % 2 ? rows : 0));
  for (int64_t i = 0; i < ts.numel(); ++i) ts.set(i, static_cast<double>(i % 11) * 0.25);
  for (int64_t i = 0; i < tsi.numel(); ++i) tsi.set(i, static_cast<double>((i * 3) % rows));
  for (int64_t i = 0; i < tss.numel(); ++i) tss.set(i, static_cast<double>(i % 13) * 0.5);
  for (int64_t i = 0; i < tsb.numel(); ++i) tsb.set(i, 1.0);
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  auto out = ex->run({{"base", tb}, {"idx", ti}, {"src", ts}, {"sidx", tsi}, {"ssrc", tss}, {"sbase", tsb}});
  ASSERT_TRUE(out.ok()) << out.error().message;

  std::vector<double> ia(tb.numel()), sa(tsb.numel());
  for (int64_t i = 0; i < tb.numel(); ++i) ia[i] = tb.at(i);
  for (int64_t j = 0; j < m; ++j) {
    int64_t r = static_cast<int64_t>(ti.at(j));
    if (r < 0) r += rows;
    for (int64_t c = 0; c < cols; ++c) ia[r * cols + c] += ts.at(j * cols + c);
  }
  for (int64_t i = 0; i < tsb.numel(); ++i) sa[i] = tsb.at(i);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < m; ++j) sa[i * rows + static_cast<int64_t>(tsi.at(i * m + j))] += tss.at(i * m + j);
  double worst = 0;
  for (int64_t i = 0; i < tb.numel(); ++i) worst = std::max(worst, std::abs((*out)[0].at(i) - ia[i]));
  for (int64_t i = 0; i < tsb.numel(); ++i) worst = std::max(worst, std::abs((*out)[1].at(i) - sa[i]));
  EXPECT_EQ(worst, 0.0);  // small multiples of 1/4: exact in f32
}

TEST(GradShape, LargePadBackwardCountsCopies) {
  // replicate pad of [64, 600] by (3, 2, 1, 4): the gradient of sum(pad(x) * 1)
  // counts how often each input element was copied.
  Graph g;
  Value* gy = g.addInput("g", {DType::F32, {69, 605}}, ValueRole::Data);
  g.addOutput(g.add("pad_backward", {gy},
                    {{"input_shape", Ints{64, 600}}, {"pads", Ints{3, 2, 1, 4}}, {"mode", std::string("replicate")}}),
              "gx");
  Tensor ones(DType::F32, {69, 605});
  for (int64_t i = 0; i < ones.numel(); ++i) ones.set(i, 1.0);
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  auto out = ex->run({{"g", ones}});
  ASSERT_TRUE(out.ok()) << out.error().message;
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 600; ++c) {
      const double rows = r == 0 ? 2 : r == 63 ? 5 : 1, colsn = c == 0 ? 4 : c == 599 ? 3 : 1;
      ASSERT_EQ((*out)[0].at(r * 600 + c), rows * colsn) << r << "," << c;
    }
}

// ---- errors --------------------------------------------------------------------

TEST(GradShape, BackwardOpsRejectBadShapes) {
  Graph g;
  Value* g23 = g.addInput("g", {DType::F64, {2, 3}}, ValueRole::Data);
  Value* idx = g.addInput("idx", {DType::I64, {4}}, ValueRole::Data);
  Value* fidx = g.addInput("fidx", {DType::F64, {4}}, ValueRole::Data);
  auto throwsWith = [&](const char* op, std::vector<Value*> ins, AttrMap attrs, const char* what) {
    try {
      g.create(op, std::move(ins), std::move(attrs));
      ADD_FAILURE() << op << ": no error";
    } catch (const KilnException& e) {
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  throwsWith("slice_backward", {g23}, {{"input_shape", Ints{2, 7}}, {"dim", int64_t{1}}, {"step", int64_t{2}}},
             "does not match");
  throwsWith("slice_backward", {g23}, {{"input_shape", Ints{2, 3}}, {"dim", int64_t{1}}, {"step", int64_t{0}}}, "step");
  throwsWith("slice_backward", {g23}, {{"input_shape", Ints{2, 3}}, {"dim", int64_t{2}}}, "out of range");
  throwsWith("select_backward", {g23}, {{"input_shape", Ints{2, 3, 4}}, {"dim", int64_t{2}}, {"index", int64_t{4}}},
             "out of range");
  throwsWith("pad_backward", {g23}, {{"input_shape", Ints{2, 2}}, {"pads", Ints{1}}}, "pairs");
  throwsWith("pad_backward", {g23}, {{"input_shape", Ints{2, 2}}, {"pads", Ints{1, 1}}, {"mode", std::string("x")}},
             "mode");
  throwsWith("index_add", {g23, idx, g23}, {{"dim", int64_t{1}}}, "must have shape");
  throwsWith("index_add", {g23, fidx, g23}, {{"dim", int64_t{1}}}, "integer");
  throwsWith("scatter_add", {g23, idx, g23}, {{"dim", int64_t{0}}}, "same rank");
}

TEST(GradShape, IndexOutOfRangeIsAnErrorAtRunTime) {
  Graph g;
  Value* base = g.addInput("base", {DType::F32, {2, 3}}, ValueRole::Data);
  Value* idx = g.addInput("idx", {DType::I64, {2, 2}}, ValueRole::Data);
  Value* src = g.addInput("src", {DType::F32, {2, 2}}, ValueRole::Data);
  g.addOutput(g.add("scatter_add", {base, idx, src}, {{"dim", int64_t{1}}}), "out");
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  auto r = ex->run({{"base", Tensor(DType::F32, {2, 3})},
                    {"idx", Tensor::fromInt64s({2, 2}, {0, 3, 1, 1})},
                    {"src", Tensor(DType::F32, {2, 2})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("index 3 is out of range"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace kiln::testing
