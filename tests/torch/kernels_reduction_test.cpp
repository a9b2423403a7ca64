// CPU reference kernels of the reduction family against libtorch: sum, mean,
// prod, amax, amin and var over every kind of dims list (all, one, negative,
// separated), keepdim, integer/bool/half inputs, special values, large inputs
// (the parallel paths), empty tensors; argmax/argmin ties and NaN; cumsum.
#include <omp.h>

#include <limits>

#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

using Dims = std::vector<int64_t>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

void check(const std::string& op, const torch::Tensor& x, const torch::Tensor& expected, const AttrMap& attrs,
           double tol = 1e-6) {
  auto out = runOp(op, {x}, attrs);
  ASSERT_EQ(out.size(), 1u) << op;
  expectClose(out[0], expected, tol, op + " " + attrToString(attrs.count("dims") ? attrs.at("dims") : Attr(Dims{})));
}

/// Dims normalized and sorted, all dims when empty.
Dims allDims(const torch::Tensor& x, Dims dims) {
  if (dims.empty())
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  for (auto& d : dims) d = d < 0 ? d + x.dim() : d;
  std::sort(dims.begin(), dims.end());
  return dims;
}

/// libtorch's reduction of `op` over `dims` (empty = all).
torch::Tensor reference(const std::string& op, const torch::Tensor& x, const Dims& dims, bool keepdim) {
  Dims all = allDims(x, dims);
  if (op == "sum") return x.sum(all, keepdim);
  if (op == "mean") return x.mean(all, keepdim);
  if (op == "amax") return x.amax(all, keepdim);
  if (op == "amin") return x.amin(all, keepdim);
  // prod takes one dim at a time; reduce from the last so indices stay valid.
  torch::Tensor r = x;
  for (auto it = all.rbegin(); it != all.rend(); ++it) r = r.prod(*it, keepdim);
  return r;
}

AttrMap reduceAttrs(const Dims& dims, bool keepdim) {
  return {{"dims", dims}, {"keepdim", int64_t{keepdim}}};
}

TEST(KernelsReduction, AllDimsListsAndKeepdimF32) {
  torch::manual_seed(20);
  auto x = torch::randn({3, 4, 5, 2});
  const std::vector<Dims> dim_lists = {{}, {0}, {-1}, {1}, {0, 2}, {1, 2}, {0, 3}, {-3, -1}, {0, 1, 2, 3}};
  for (const char* op : {"sum", "mean", "prod", "amax", "amin"})
    for (const Dims& dims : dim_lists)
      for (bool keep : {false, true}) check(op, x, reference(op, x, dims, keep), reduceAttrs(dims, keep));
}

TEST(KernelsReduction, ScalarAndSizeOneDims) {
  torch::manual_seed(21);
  auto s = torch::randn({});
  auto x = torch::randn({1, 6, 1});
  for (const char* op : {"sum", "mean", "prod", "amax", "amin"}) {
    check(op, s, reference(op, s, {}, false), reduceAttrs({}, false));
    check(op, x, reference(op, x, {0}, true), reduceAttrs({0}, true));
    check(op, x, reference(op, x, {0, 2}, false), reduceAttrs({0, 2}, false));
  }
}

TEST(KernelsReduction, IntegerBoolAndHalfInputs) {
  torch::manual_seed(22);
  auto i32 = torch::randint(-50, 50, {4, 6}, torch::kInt32);
  auto i8 = torch::randint(-3, 4, {4, 6}, torch::kInt8);
  auto u8 = torch::randint(0, 200, {4, 6}, torch::kUInt8);
  auto bl = torch::rand({4, 6}) > 0.5;
  for (auto& x : {i32, i8, u8, bl})
    for (const Dims& dims : {Dims{}, Dims{1}, Dims{0}}) {
      check("sum", x, x.sum(allDims(x, dims)), reduceAttrs(dims, false));  // -> i64
      if (x.scalar_type() != torch::kBool) {
        check("amax", x, x.amax(allDims(x, dims)), reduceAttrs(dims, false));
        check("amin", x, x.amin(allDims(x, dims)), reduceAttrs(dims, false));
      }
    }
  check("prod", i8, i8.prod(1), reduceAttrs({1}, false));
  auto d = torch::randn({5, 7}, torch::kFloat64);
  for (const char* op : {"sum", "mean", "prod", "amax", "amin"})
    check(op, d, reference(op, d, {1}, false), reduceAttrs({1}, false), 1e-12);
  auto h = torch::randn({5, 7}).to(torch::kBFloat16);
  for (const char* op : {"sum", "mean", "amax"})
    check(op, h, reference(op, h, {0}, false), reduceAttrs({0}, false), 1e-2);
  auto f16 = torch::randn({5, 7}).to(torch::kFloat16);
  check("sum", f16, f16.to(torch::kFloat32).sum(Dims{0}).to(torch::kFloat16), reduceAttrs({0}, false), 1e-2);
}

TEST(KernelsReduction, SpecialValuesPropagate) {
  auto x = torch::tensor({{1.0, kNaN, 3.0}, {-kInf, 2.0, 5.0}, {kInf, -1.0, 0.0}});
  for (const char* op : {"sum", "mean", "prod", "amax", "amin"})
    for (const Dims& dims : {Dims{}, Dims{0}, Dims{1}})
      check(op, x, reference(op, x, dims, false), reduceAttrs(dims, false));
}

TEST(KernelsReduction, LargeInputsParallelPaths) {
  torch::manual_seed(23);
  auto flat = torch::randn({1 << 20});
  check("sum", flat, flat.sum(), reduceAttrs({}, false));
  check("mean", flat, flat.mean(), reduceAttrs({}, false));
  check("amax", flat, flat.amax(0), reduceAttrs({0}, false));
  check("var", flat, flat.var(), {});  // blocked Welford partials merged
  auto tall = torch::randn({4096, 64});
  check("sum", tall, tall.sum(Dims{0}), reduceAttrs({0}, false));  // one output row, strided
  check("amin", tall, tall.amin(Dims{0}), reduceAttrs({0}, false));
  auto nchw = torch::randn({8, 64, 28, 28});
  check("mean", nchw, nchw.mean({2, 3}, true), reduceAttrs({2, 3}, true));  // global average pool
  check("sum", nchw, nchw.sum({0, 2, 3}), reduceAttrs({0, 2, 3}, false));   // batch-norm style
  check("sum", nchw, nchw.sum(Dims{0}), reduceAttrs({0}, false));           // strided rows
  check("var", nchw, nchw.var({0, 2, 3}, /*unbiased=*/false), {{"dims", Dims{0, 2, 3}}, {"correction", 0.0}});
}

/// Few outputs over many reduced rows (a bias gradient, channels-last batch
/// norm statistics): the reduced rows are cut into fixed chunks whose
/// partials combine in order, so a chunk may start inside a reduced dim, and
/// the bits do not depend on the thread count.
TEST(KernelsReduction, ChunkedReducedRowsMatchTorchOnAnyThreadCount) {
  torch::manual_seed(29);
  for (auto dt : {torch::kFloat32, torch::kFloat64}) {
    const double tol = dt == torch::kFloat64 ? 1e-12 : 1e-6;
    auto bias = torch::randn({6, 300, 40}, dt);  // 1800 rows of 40, chunks of 409 rows
    check("sum", bias, bias.sum(Dims{0, 1}), reduceAttrs({0, 1}, false), tol);
    check("mean", bias, bias.mean(Dims{0, 1}, true), reduceAttrs({0, 1}, true), tol);
    auto nhwc = torch::randn({4, 14, 14, 600}, dt);  // two inner blocks, one of 88 columns
    check("sum", nhwc, nhwc.sum(Dims{0, 1, 2}), reduceAttrs({0, 1, 2}, false), tol);
    auto split = torch::randn({50, 3, 70, 8}, dt);  // kept dim between reduced ones
    check("sum", split, split.sum(Dims{0, 2}), reduceAttrs({0, 2}, false), tol);
  }
  auto nan = torch::randn({3000, 16});
  nan.index_put_({2500, 5}, kNaN);  // in the last chunk only
  check("amax", nan, nan.amax(Dims{0}), reduceAttrs({0}, false));
  check("sum", nan, nan.sum(Dims{0}), reduceAttrs({0}, false));
  const int threads = omp_get_max_threads();
  auto x = torch::randn({4, 256, 512});
  std::vector<torch::Tensor> by_threads;
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    by_threads.push_back(runOp("sum", {x}, reduceAttrs({0, 1}, false))[0]);
  }
  omp_set_num_threads(threads);
  for (size_t k = 1; k < by_threads.size(); ++k)
    EXPECT_TRUE(torch::equal(by_threads[k], by_threads[0])) << k + 1 << " threads";
}

TEST(KernelsReduction, EmptyTensors) {
  auto e = torch::zeros({0, 3});
  check("sum", e, e.sum(Dims{0}), reduceAttrs({0}, false));
  check("prod", e, e.prod(0), reduceAttrs({0}, false));
  check("mean", e, e.mean(Dims{0}), reduceAttrs({0}, false));  // NaN
  check("sum", e, e.sum(Dims{1}), reduceAttrs({1}, false));    // empty output
  check("amax", e, e.amax(1), reduceAttrs({1}, false));        // empty output: fine
}

TEST(KernelsReductionVar, CorrectionKeepdimAndDims) {
  torch::manual_seed(24);
  auto x = torch::randn({4, 5, 6}) * 3 + 10;
  for (int64_t corr : {0, 1, 2})
    for (const Dims& dims : {Dims{}, Dims{1}, Dims{-1}, Dims{0, 2}})
      for (bool keep : {false, true})
        check("var", x, torch::var(x, allDims(x, dims), c10::optional<int64_t>(corr), keep),
              {{"dims", dims}, {"correction", static_cast<double>(corr)}, {"keepdim", int64_t{keep}}});
  auto d = x.to(torch::kFloat64);
  check("var", d, d.var(Dims{1}), {{"dims", Dims{1}}}, 1e-12);
  // One element with correction 1: 0/0.
  auto one = torch::randn({3, 1});
  check("var", one, one.var(Dims{1}), {{"dims", Dims{1}}});
}

TEST(KernelsReductionArg, TiesNaNNegativeDimKeepdim) {
  auto x = torch::tensor({{1.0, 3.0, 3.0, -2.0}, {kNaN, 5.0, kNaN, 5.0}, {-2.0, -2.0, 0.0, 1.0}});
  for (bool keep : {false, true})
    for (int64_t dim : {0, 1, -1, -2}) {
      AttrMap a = {{"dim", dim}, {"keepdim", int64_t{keep}}};
      check("argmax", x, x.argmax(dim, keep), a);
      check("argmin", x, x.argmin(dim, keep), a);
    }
  torch::manual_seed(25);
  auto i = torch::randint(0, 4, {5, 6, 7}, torch::kInt32);  // many ties
  for (int64_t dim : {0, 1, 2}) {
    check("argmax", i, i.argmax(dim), {{"dim", dim}});
    check("argmin", i, i.argmin(dim), {{"dim", dim}});
  }
  auto big = torch::randn({64, 1000});
  check("argmax", big, big.argmax(1), {{"dim", int64_t{1}}});
  auto s = torch::randn({});
  check("argmax", s, s.argmax(0), {{"dim", int64_t{0}}});
}

TEST(KernelsReductionArg, LongRowsTiesNaNInfAcrossLanes) {
  // Rows of 16 elements and more take the 16-lane loop: ties between lanes
  // and within a lane, NaN and +-inf anywhere (also in the ragged tail),
  // f32, f64 and bf16.
  torch::manual_seed(27);
  for (int64_t r : {16, 17, 31, 33, 100, 1000}) {
    auto x = torch::randint(-3, 4, {12, r}).to(torch::kFloat32);  // many ties
    x[1][r - 1] = kNaN;                                                         // NaN in the tail
    x[2][3] = kNaN;
    x[2][r / 2] = kNaN;                                                         // two NaN: the first wins
    x[3][r - 2] = INFINITY;
    x[4][0] = -INFINITY;
    x[5].fill_(kNaN);
    x[6].fill_(2.0);                                                            // all tied
    x[7][r - 1] = 100.0;
    for (auto dt : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
      auto xd = x.to(dt);
      check("argmax", xd, xd.argmax(1), {{"dim", int64_t{1}}});
      check("argmin", xd, xd.argmin(1), {{"dim", int64_t{1}}});
      check("argmax", xd, xd.argmax(-1, true), {{"dim", int64_t{-1}}, {"keepdim", int64_t{1}}});
    }
  }
}

/// topk's indices (ties="stable", the default) against torch's stable sort
/// cut to k: NaN above every number, ties by the lower index first, along
/// the last dim and an inner one, largest and smallest, k = 0 and all.
TEST(KernelsReductionTopk, IndicesMatchTorchsStableSort) {
  torch::manual_seed(31);
  auto f = torch::randn({5, 37});
  f.index_put_({1, 4}, kNaN);
  f.index_put_({3, 10}, kNaN);
  f.index_put_({3, 20}, kNaN);
  auto ties = torch::randint(0, 4, {6, 9}, torch::kInt64);
  auto d = torch::randn({3, 50, 4}, torch::kFloat64);
  for (const torch::Tensor& x : {f, ties, d})
    for (int64_t dim : {int64_t{-1}, int64_t{0}, int64_t{1}})
      for (bool largest : {true, false}) {
        const int64_t size = x.size(dim);
        for (int64_t k : {int64_t{0}, int64_t{1}, size / 2, size}) {
          auto want = std::get<1>(x.sort(/*stable=*/true, dim, /*descending=*/largest)).narrow(dim, 0, k);
          auto got = runOp("topk", {x}, {{"k", k}, {"dim", dim}, {"largest", int64_t{largest}}});
          ASSERT_EQ(got.size(), 1u);
          EXPECT_TRUE(torch::equal(got[0], want))
              << x.dtype() << " dim " << dim << " k " << k << " largest " << largest << "\n"
              << got[0] << "\n" << want;
        }
      }
}

/// ties="topk" and "kthvalue" against torch.topk's and torch.kthvalue's own
/// indices, on rows full of ties (a few distinct values, NaN among them),
/// short rows and rows long enough (k * 64 <= n) for topk's partial sort.
TEST(KernelsReductionTopk, TieOrdersMatchTorchTopkAndKthvalue) {
  torch::manual_seed(32);
  std::vector<torch::Tensor> xs;
  for (int64_t n : {int64_t{7}, int64_t{33}, int64_t{64}, int64_t{200}, int64_t{1000}}) {
    auto f = torch::randint(0, 5, {4, n}).to(torch::kFloat32);
    f.index_put_({1, n / 2}, kNaN);
    f.index_put_({2, 0}, kNaN);
    f.index_put_({2, n - 1}, kNaN);
    xs.push_back(f);
    xs.push_back(torch::randint(-2, 2, {3, n}, torch::kInt64));
    xs.push_back(torch::randint(0, 3, {2, n, 3}).to(torch::kFloat64));  // along an inner dim too
  }
  for (const torch::Tensor& x : xs)
    for (int64_t dim : {int64_t{1}, int64_t{-1}}) {
      const int64_t size = x.size(dim);
      for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{3}, size / 3 + 1, size}) {
        const std::string what = c10::toString(x.scalar_type()) + std::string(" n ") + std::to_string(size) + " dim " +
                                 std::to_string(dim) + " k " + std::to_string(k);
        for (bool largest : {true, false}) {
          auto want = std::get<1>(x.topk(k, dim, largest));
          auto got = runOp("topk", {x},
                           {{"k", k}, {"dim", dim}, {"largest", int64_t{largest}}, {"ties", std::string("topk")}});
          EXPECT_TRUE(torch::equal(got.at(0), want)) << "topk " << what << " largest " << largest;
        }
        auto want = std::get<1>(x.kthvalue(k, dim, /*keepdim=*/true));
        auto got =
            runOp("topk", {x}, {{"k", k}, {"dim", dim}, {"largest", int64_t{0}}, {"ties", std::string("kthvalue")}});
        EXPECT_TRUE(torch::equal(got.at(0).narrow(dim, k - 1, 1), want)) << "kthvalue " << what;
      }
    }
}

TEST(KernelsReductionCumsum, FloatIntBoolAndDims) {
  torch::manual_seed(26);
  auto x = torch::randn({4, 5, 6});
  for (int64_t dim : {0, 1, 2, -1}) check("cumsum", x, x.cumsum(dim), {{"dim", dim}});
  auto i = torch::randint(-9, 9, {3, 8}, torch::kInt32);
  check("cumsum", i, i.cumsum(1), {{"dim", int64_t{1}}});  // -> i64
  auto b = torch::rand({3, 8}) > 0.3;
  check("cumsum", b, b.cumsum(0), {{"dim", int64_t{0}}});
  auto d = torch::randn({100}, torch::kFloat64);
  check("cumsum", d, d.cumsum(0), {{"dim", int64_t{0}}}, 1e-12);
  auto big = torch::randn({200, 300});
  check("cumsum", big, big.cumsum(0), {{"dim", int64_t{0}}});
  check("cumsum", torch::zeros({0, 3}), torch::zeros({0, 3}), {{"dim", int64_t{0}}});
}

TEST(KernelsReductionCumprod, FloatIntAndDims) {
  torch::manual_seed(27);
  auto x = torch::rand({4, 5, 6}) + 0.5;
  for (int64_t dim : {0, 1, 2, -1}) check("cumprod", x, x.cumprod(dim), {{"dim", dim}});
  auto z = torch::randn({5, 7});
  z.index_put_({1, 3}, 0.0);
  check("cumprod", z, z.cumprod(1), {{"dim", int64_t{1}}});
  auto i = torch::randint(-3, 4, {3, 8}, torch::kInt32);
  check("cumprod", i, i.cumprod(1), {{"dim", int64_t{1}}});  // -> i64
  auto d = torch::rand({60}, torch::kFloat64) + 0.5;
  check("cumprod", d, d.cumprod(0), {{"dim", int64_t{0}}}, 1e-12);
  check("cumprod", torch::zeros({0, 3}), torch::zeros({0, 3}), {{"dim", int64_t{0}}});
}

}  // namespace
}  // namespace kiln::testing
