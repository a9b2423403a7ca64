// ATen functions at their singular points, end to end: each case is a
// TorchScript function compiled here with libtorch (torch::jit::Module::
// define), saved, imported by Kiln's TorchScript importer (so the lowering
// and any decomposition it emits are under test), differentiated by Kiln's
// autodiff and run on the CPU executor, against the same module under
// torch.autograd, in float64 and float32. The comparison is the op-level
// harness's (grad_edge_values_test.cpp): NaN, +Inf and -Inf in the same
// places, finite values within 1e-9 (float64) or 1e-5 (float32).
//
// These are the functions Kiln builds from several ops, where the
// composite's gradient at a singular point is not the composition's: norms
// and F.normalize of a zero vector (PyTorch masks the 0/0 to 0), std of a
// constant row (likewise), max/min with indices on ties (the whole gradient
// to the returned index), cosine similarity of a zero vector (its eps
// clamp), atan2 at the origin, and where-masked branches that are singular
// (log(0), 1/0, sqrt(0): PyTorch's NaN, because 0 * inf is NaN).
// And detach, through which no gradient flows (a straight-through
// estimator's rounding, a stop-gradient target).
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <filesystem>

#include "core/import/torchscript/torchscript_importer.h"
#include "tests/torch/grad_case.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

/// One function: `body` is forward's body over arguments x0, x1, ... (one
/// per arg); its floating results go into the loss.
struct AtenCase {
  std::string label;
  std::string body;
  std::vector<Arg> args;
};

/// A scripted module whose forward is the case's body, saved under the work dir.
std::string saveModule(const AtenCase& c, const std::string& tag) {
  torch::jit::Module m("EdgeCase");
  m.register_attribute("training", c10::BoolType::get(), false);
  std::string params = "self";
  for (size_t i = 0; i < c.args.size(); ++i) params += ", x" + std::to_string(i);
  m.define("def forward(" + params + "):\n" + c.body + "\n");
  const fs::path dir = fs::path(KILN_WORK_DIR) / "grad_edge_values_aten";
  fs::create_directories(dir);
  std::string path = (dir / (tag + ".pt")).string();
  m.save(path);
  return path;
}

void checkAten(const AtenCase& c, torch::ScalarType dtype) {
  // PyTorch's reference is eager autograd over the module's aten ops: the
  // profiling executor would differentiate its own fused graphs with the
  // formulas of TorchScript's symbolic autodiff (hardtanh there passes no
  // gradient at NaN; eager's hardtanh_backward does).
  torch::jit::setGraphExecutorOptimize(false);
  const std::string what = c.label + " " + c10::toString(dtype);
  SCOPED_TRACE(what);
  std::string path;
  try {
    path = saveModule(c, std::to_string(std::hash<std::string>{}(what)));
  } catch (const std::exception& e) {
    FAIL() << "scripting: " << e.what();
  }
  auto module = std::make_shared<torch::jit::Module>(torch::jit::load(path));
  GradCase gc{c.label, {}, c.args, [module](const Ts& x) {
                std::vector<torch::jit::IValue> ins(x.begin(), x.end());
                torch::jit::IValue r = module->forward(ins);
                Ts outs;
                if (r.isTensor()) return Ts{r.toTensor()};
                for (const auto& e : r.toTuple()->elements()) outs.push_back(e.toTensor());
                return outs;
              }};
  const Ts inputs = drawInputs(gc, dtype);
  Ts weights;
  Sides want = torchSide(gc, inputs, weights);

  ImportOptions options;
  for (const torch::Tensor& t : inputs) options.input_types.push_back(fromTorch(t).type());
  auto model = importTorchScript(path, options);
  ASSERT_TRUE(model.ok()) << model.error().message;
  Graph& g = model->graph;
  std::vector<Value*> outs, wrt;
  for (const GraphOutput& o : g.outputs()) outs.push_back(o.value);
  g.mutableOutputs().clear();
  TensorMap bound = model->weights;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Value* in = g.findInput("input" + std::to_string(i));
    ASSERT_TRUE(in) << "no input" << i;
    bound[in->name()] = fromTorch(inputs[i]);
    if (c.args[i].diff) wrt.push_back(in);
  }
  Sides got = kilnRun(g, outs, wrt, std::move(bound), weights);
  if (got.outputs.empty()) return;
  compareSides(got, want, dtype == torch::kFloat64 ? 1e-9 : 1e-5, what, inputs);
}

void checkAll(const std::vector<AtenCase>& cases) {
  for (const AtenCase& c : cases)
    for (torch::ScalarType dtype : {torch::kFloat64, torch::kFloat32}) checkAten(c, dtype);
}

/// Rows: all zeros, one non-zero, ordinary, signed zeros, an infinity, a NaN.
torch::Tensor normRows() {
  return vals({0, 0, 0, 0, 0, 3, 0, 0, 1, -2, 0.5, 2, -0.0, 0.0, -0.0, 0.0, 1, kInf, 0, 1, kNaN, 1, 0, 2}, {6, 4});
}

TEST(EdgeValuesAten, NormsOfZeroVectors) {
  const Arg x = fixed(normRows());
  checkAll({
      {"norm p=2 over dim 1", "    return torch.norm(x0, 2., [1])", {x}},
      {"linalg_vector_norm p=2, keepdim", "    return torch.linalg_vector_norm(x0, 2., [1], True)", {x}},
      {"norm p=2 over all of a zero tensor",
       "    return torch.norm(x0)",
       {fixed(torch::zeros({2, 3}, torch::kFloat64))}},
      {"norm p=1", "    return torch.norm(x0, 1., [1])", {x}},
      {"norm p=inf", "    return torch.linalg_vector_norm(x0, float('inf'), [1])", {x}},
      {"frobenius_norm", "    return torch.frobenius_norm(x0, [1])", {x}},
      // F.normalize(x, dim=1) as torch.nn.functional writes it.
      {"F.normalize", "    return x0 / x0.norm(2., [1], True).clamp_min(1e-12).expand_as(x0)", {x}},
      // Swin-V2's cosine attention: keys of padded positions are all zero.
      {"cosine attention over zero keys",
       "    q = x0 / x0.norm(2., [-1], True).clamp_min(1e-12).expand_as(x0)\n"
       "    k = x1 / x1.norm(2., [-1], True).clamp_min(1e-12).expand_as(x1)\n"
       "    return torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * 10., -1)",
       {fixed(vals({1, 2, 0, 1, -1, 0.5}, {3, 2})), fixed(vals({0, 0, 1, 1, 0, 0, 2, -1}, {4, 2}))}},
  });
}

TEST(EdgeValuesAten, StdAndVarOfConstantRows) {
  // A constant row, a row of zeros, an ordinary row, a row with an infinity.
  const Arg x = fixed(vals({2, 2, 2, 2, 0, 0, 0, 0, 1, -2, 0.5, 2, 1, kInf, 0, 1}, {4, 4}));
  checkAll({
      {"std over dim 1", "    return torch.std(x0, [1])", {x}},
      {"std, correction 0, keepdim", "    return torch.std(x0, [1], False, True)", {x}},
      {"std over all of a constant tensor",
       "    return torch.std(x0)",
       {fixed(torch::full({2, 3}, 1.5, torch::kFloat64))}},
      // Not on the row with an infinity: PyTorch's std_mean takes its mean
      // from a Welford update, NaN there, where torch.mean (and Kiln) give inf.
      {"std_mean",
       "    s, m = torch.std_mean(x0, [1])\n    return s, m",
       {fixed(vals({2, 2, 2, 2, 0, 0, 0, 0, 1, -2, 0.5, 2}, {3, 4}))}},
      {"var over dim 1", "    return torch.var(x0, [1])", {x}},
  });
}

TEST(EdgeValuesAten, MaxMinWithIndicesOnTies) {
  // Ties (twice at the front, at the back), a NaN, infinities.
  const Arg x =
      fixed(vals({3, 3, 1, 2, 1, 2, 5, 5, kNaN, 1, 2, kNaN, kInf, kInf, 0, 1, -kInf, -kInf, -kInf, -kInf}, {5, 4}));
  // Rows long enough for topk's partial sort (k * 64 <= n), of three values.
  torch::manual_seed(55);
  const Arg long_rows = fixed(torch::randint(0, 3, {3, 140}, torch::TensorOptions().dtype(torch::kFloat64)));
  checkAll({
      {"max(dim) values", "    v, i = torch.max(x0, 1)\n    return v", {x}},
      {"min(dim) values, keepdim", "    v, i = torch.min(x0, 1, True)\n    return v", {x}},
      {"max(dim 0) values", "    v, i = torch.max(x0, 0)\n    return v", {x}},
      {"max() of all", "    return torch.max(x0)", {x}},
      {"sort", "    v, i = torch.sort(x0, 1)\n    return v", {x}},
      {"topk", "    v, i = torch.topk(x0, 2, 1)\n    return v", {x}},
      {"topk smallest", "    v, i = torch.topk(x0, 3, 1, False)\n    return v", {x}},
      {"kthvalue", "    v, i = torch.kthvalue(x0, 2, 1)\n    return v", {x}},
      {"topk of long rows", "    v, i = torch.topk(x0, 2, 1)\n    return v", {long_rows}},
      {"topk of long rows, k past the partial sort", "    v, i = torch.topk(x0, 5, 1)\n    return v", {long_rows}},
      {"kthvalue of long rows", "    v, i = torch.kthvalue(x0, 70, 1)\n    return v", {long_rows}},
  });
}

TEST(EdgeValuesAten, CosineSimilarityOfZeroVectors) {
  // Zero vectors, an infinity, norms below eps (0.3 < 0.5, 5e-9 < 1e-8), parallel vectors.
  const Arg a = fixed(vals({0, 0, 0, 1, 2, 3, 0, 0, 0, 1, kInf, 0, 0.1, 0.2, 0.2, 3e-9, 4e-9, 0}, {6, 3}));
  const Arg b = fixed(vals({1, 2, 3, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 1, 2, 3}, {6, 3}));
  checkAll({
      {"cosine_similarity dim 1", "    return torch.cosine_similarity(x0, x1, 1, 1e-8)", {a, b}},
      {"cosine_similarity eps 0.5", "    return torch.cosine_similarity(x0, x1, 1, 0.5)", {a, b}},
  });
}

TEST(EdgeValuesAten, Atan2Expm1Log1p) {
  const std::vector<double> some = {-kInf, -1, -0.0, 0.0, 1e-300, 2, kInf, kNaN};
  std::vector<double> a, b;
  for (double u : some)
    for (double v : some) a.push_back(u), b.push_back(v);
  checkAll({
      {"atan2 of every pair, the origin included", "    return torch.atan2(x0, x1)", {fixed(vals(a)), fixed(vals(b))}},
      {"atan2 of a tensor and a broadcast row",
       "    return torch.atan2(x0, x1)",
       {fixed(vals({0, 1, -1, 0, 0, 2}, {3, 2})), fixed(vals({0.0, -0.0}, {1, 2}))}},
      {"atan2 of integers (float result)",
       "    return torch.atan2(x0.long(), x1.long()) * x0 * x1",
       {fixed(vals({0, 1, -3, 2, 0})), fixed(vals({0, -2, 0, 5, 4}))}},
      {"expm1",
       "    return torch.expm1(x0)",
       {fixed(padded({-800, -1, -1e-10, -0.0, 0.0, 1e-10, 1, 800, kInf, kNaN}))}},
      {"log1p", "    return torch.log1p(x0)", {fixed(padded({-2, -1, -0.999, -0.0, 0.0, 1e-10, 1, kInf, kNaN}))}},
  });
}

TEST(EdgeValuesAten, DetachStopsTheGradient) {
  const Arg x = fixed(padded({-kInf, -1.3, -0.0, 0.0, 0.4, 2.6, kInf, kNaN}));
  const Arg y = fixed(padded({1, -2, 0.5, 3, kInf, 0.0, -1, 2}));
  checkAll({
      {"straight-through rounding", "    return x0 + (torch.round(x0 * 4.) / 4. - x0).detach()", {x}},
      {"stop-gradient products", "    return x0 * x1.detach() + x1 * x0.detach() * 2.", {x, y}},
      {"a detached target", "    t = torch.tanh(x0).detach()\n    return (torch.tanh(x0) - t * x1) ** 2.", {x, y}},
  });
}

TEST(EdgeValuesAten, WhereMaskedSingularBranches) {
  const Arg x = fixed(padded({-1, -0.0, 0.0, 0.5, 2, kInf, kNaN}));
  checkAll({
      {"where(x > 0, log(x), 0)", "    return torch.where(x0 > 0, torch.log(x0), torch.zeros_like(x0))", {x}},
      {"where(x != 0, 1 / x, 0)", "    return torch.where(x0 != 0, 1. / x0, torch.zeros_like(x0))", {x}},
      {"where(x > 0, sqrt(x), x)", "    return torch.where(x0 > 0, torch.sqrt(x0), x0)", {x}},
      {"masked_fill(x == 0, 1) then log", "    return torch.log(x0.masked_fill(x0 == 0, 1.))", {x}},
      {"logsumexp of masked rows",
       "    return torch.logsumexp(x0, [1])",
       {fixed(vals({-kInf, -kInf, -kInf, 0, -kInf, 1, kInf, 0, 1, kNaN, 1, 2}, {4, 3}))}},
  });
}

TEST(EdgeValuesAten, DecomposedActivationsAtTheirKinks) {
  const Arg x = fixed(padded({-kInf, -1, -0.5, -0.0, 0.0, 0.5, 1, kInf, kNaN}));
  checkAll({
      {"hardshrink at lambda", "    return torch.hardshrink(x0, 0.5)", {x}},
      {"softshrink at lambda", "    return torch.softshrink(x0, 0.5)", {x}},
      {"celu at 0", "    return torch.celu(x0, 2.)", {x}},
      {"selu at 0", "    return torch.selu(x0)", {x}},
      {"prelu at 0", "    return torch.prelu(x0, x1)", {x, fixed(vals({0.25}))}},
      {"relu6 at 0 and 6",
       "    return torch.hardtanh(x0, 0., 6.)",
       {fixed(padded({-1, -0.0, 0.0, 3, 6, 7, kInf, kNaN}))}},
      {"xlogy at x = 0",
       "    return torch.xlogy(x0, x1)",
       {fixed(vals({0, 0, 0, 1, 2, 0, 0, 3, -1, 0, 0, 0})),
        fixed(vals({2, 1, kNaN, 0, kInf, -1, 0.5, -2, kNaN, kInf, 0, -kInf}))}},
      {"logsigmoid", "    return torch.log_sigmoid(x0)", {x}},
  });
}

}  // namespace
}  // namespace kiln::testing
