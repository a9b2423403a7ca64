#include "tests/torch/grad_case.h"

#include <cmath>
#include <sstream>

#include "passes/autodiff.h"
#include "passes/fuse.h"
#include "passes/simplify.h"

namespace kiln::testing {

torch::Tensor uniform(const Ints& shape, double lo, double hi) {
  return torch::rand(shape, torch::kFloat64) * (hi - lo) + lo;
}

torch::Tensor vals(std::vector<double> values, Ints shape) {
  torch::Tensor t = torch::tensor(values, torch::kFloat64);
  return shape.empty() ? t : t.reshape(shape);
}

torch::Tensor padded(std::vector<double> v) {
  while (v.size() % 64) v.push_back(0.25);
  return vals(v);
}

Arg param(Ints shape, double lo, double hi, std::vector<double> kinks, double margin) {
  return {[=] {
    torch::Tensor x = uniform(shape, lo, hi);
    for (double k : kinks) {
      torch::Tensor d = x - k;
      x = torch::where(d.abs() < margin, k + torch::where(d >= 0, margin + d, d - margin), x);
    }
    return x;
  }};
}

Arg buffer(Ints shape, double lo, double hi) {
  return {[=] { return uniform(shape, lo, hi); }, false};
}

Arg indices(Ints shape, int64_t n) {
  return {[=] { return torch::randint(0, n, shape, torch::kInt64); }, false};
}

Arg mask(Ints shape) {
  return {[=] { return torch::rand(shape) < 0.5; }, false};
}

Arg fixed(torch::Tensor t) {
  return {[=] { return t.clone(); }, t.is_floating_point()};
}

Arg fixedData(torch::Tensor t) {
  return {[=] { return t.clone(); }, false};
}

Sides torchSide(const GradCase& c, const Ts& inputs, Ts& weights) {
  Ts xs;
  for (size_t i = 0; i < inputs.size(); ++i)
    xs.push_back(c.args[i].diff ? inputs[i].clone().requires_grad_() : inputs[i].clone());
  Sides s{c.torch.fn(xs), {}};
  if (weights.empty())
    for (const torch::Tensor& o : s.outputs) weights.push_back(uniform(o.sizes().vec(), -1, 1).to(o.scalar_type()));
  torch::Tensor loss = torch::zeros({}, weights[0].options());
  for (size_t k = 0; k < s.outputs.size(); ++k) loss = loss + (s.outputs[k] * weights[k]).sum();
  if (loss.requires_grad()) loss.backward();
  for (size_t i = 0; i < xs.size(); ++i)
    if (c.args[i].diff) s.grads.push_back(xs[i].grad());
  for (torch::Tensor& o : s.outputs) o = o.detach();
  return s;
}

namespace {

/// The same values, -0.0 and +0.0 alike, NaN where the other has NaN.
bool sameValues(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (!a.is_floating_point()) return torch::equal(a, b);
  return torch::allclose(a, b, /*rtol=*/0, /*atol=*/0, /*equal_nan=*/true);
}

/// The step's graph once more through simplify and fuse (the training
/// pipeline's rewrites of single ops, bit for bit the same values by their
/// contract): every output must equal the plain graph's, so the rules and
/// the fused kernels keep each edge value too.
void expectSameAfterSimplifyAndFuse(const Graph& g, const TensorMap& bound, const std::vector<Tensor>& plain) {
  Graph opt = g.clone();
  PassContext ctx;
  for (auto* pass : {runSimplify, runFuse}) {
    auto r = pass(opt, ctx);
    if (!r) return ADD_FAILURE() << "simplify/fuse: " << r.error().message, void();
  }
  auto ex = CpuExecutor::create(opt, {.seed = 1, .num_threads = 1});
  if (!ex) return ADD_FAILURE() << "after simplify and fuse: " << ex.error().message, void();
  auto out = ex->run(bound);
  if (!out) return ADD_FAILURE() << "after simplify and fuse: " << out.error().message, void();
  for (size_t k = 0; k < plain.size(); ++k)
    EXPECT_TRUE(sameValues(toTorch((*out)[k]), toTorch(plain[k])))
        << "output " << g.outputs()[k].name << " after simplify and fuse differs from the plain graph's"
        << "\n  plain:     " << toTorch(plain[k]).flatten().slice(0, 0, 16)
        << "\n  optimized: " << toTorch((*out)[k]).flatten().slice(0, 0, 16);
}

}  // namespace

Sides kilnRun(Graph& g, const std::vector<Value*>& outs, const std::vector<Value*>& wrt, TensorMap bound,
              const Ts& weights) {
  Value* loss = nullptr;
  for (size_t k = 0; k < weights.size(); ++k) {
    Tensor w = fromTorch(weights[k]);
    Value* wv = g.addInput("w" + std::to_string(k), w.type(), ValueRole::Data);
    bound[wv->name()] = w;
    Value* out = outs.at(k);
    if (out->dtype() != w.dtype()) return ADD_FAILURE() << "output " << k << " is " << out->type().str(), Sides{};
    Value* term = g.add("sum", {g.add("mul", {out, wv})});
    loss = loss ? g.add("add", {loss, term}) : term;
  }
  g.addOutput(loss, "loss", OutputRole::Loss);
  for (size_t k = 0; k < outs.size(); ++k) g.addOutput(outs[k], "out" + std::to_string(k));
  auto grads = differentiate(g, loss, wrt);
  if (!grads) return ADD_FAILURE() << grads.error().message, Sides{};
  std::vector<size_t> with_grad;
  for (size_t i = 0; i < grads->size(); ++i)
    if ((*grads)[i]) g.addOutput((*grads)[i], "grad" + std::to_string(i), OutputRole::Gradient), with_grad.push_back(i);
  auto ex = CpuExecutor::create(g, {.seed = 1, .num_threads = 1});
  if (!ex) return ADD_FAILURE() << ex.error().message, Sides{};
  auto out = ex->run(bound);
  if (!out) return ADD_FAILURE() << out.error().message, Sides{};
  expectSameAfterSimplifyAndFuse(g, bound, *out);
  Sides s;
  for (size_t k = 0; k < outs.size(); ++k) s.outputs.push_back(toTorch((*out)[1 + k]));
  s.grads.resize(wrt.size());
  for (size_t j = 0; j < with_grad.size(); ++j) s.grads[with_grad[j]] = toTorch((*out)[1 + outs.size() + j]);
  return s;
}

Sides kilnSide(const GradCase& c, const Ts& inputs, const Ts& weights) {
  Graph g;
  TensorMap bound;
  std::vector<Value*> ins, wrt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = fromTorch(inputs[i]);
    ins.push_back(g.addInput("x" + std::to_string(i), t.type(), c.args[i].diff ? ValueRole::Param : ValueRole::Data));
    if (c.args[i].diff) wrt.push_back(ins.back());
    bound[ins.back()->name()] = t;
  }
  Node* n = nullptr;
  try {
    n = g.create(c.op, ins, c.attrs);
  } catch (const std::exception& e) {
    return ADD_FAILURE() << "building " << c.op << ": " << e.what(), Sides{};
  }
  std::vector<Value*> outs;
  for (size_t k = 0; k < n->numOutputs(); ++k) outs.push_back(n->output(k));
  return kilnRun(g, outs, wrt, std::move(bound), weights);
}

Ts drawInputs(const GradCase& c, torch::ScalarType dtype) {
  torch::manual_seed(2024);
  Ts inputs;
  for (const Arg& a : c.args) {
    torch::Tensor t = a.make();
    inputs.push_back(t.is_floating_point() ? t.to(dtype) : t);
  }
  return inputs;
}

namespace {

/// The values of small tensors, for a failure message at edge values.
std::string show(const torch::Tensor& t) {
  if (t.numel() > 48) return " (" + std::to_string(t.numel()) + " values)";
  std::ostringstream o;
  o << " " << t.to(torch::kFloat64).flatten();
  std::string s = o.str();
  // libtorch prints a column: one line reads better in gtest's output.
  for (char& ch : s)
    if (ch == '\n') ch = ' ';
  return s;
}

std::string showInputs(const Ts& inputs) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += "\n  input " + std::to_string(i) + ":" + show(inputs[i]);
  return s;
}

void expectAgree(const torch::Tensor& got, const torch::Tensor& want, double tol, const std::string& what,
                 const Ts& inputs) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  if (!want.is_floating_point()) {
    EXPECT_TRUE(torch::equal(got, want)) << what << "\n  Kiln:   " << show(got) << "\n  PyTorch:" << show(want);
    return;
  }
  const double err = relativeMaxError(got, want);
  if (err <= tol) return;
  if (want.numel() <= 48) {
    ADD_FAILURE() << what << ": relative max error " << err << " (inf: NaN or infinities differ)"
                  << "\n  Kiln:   " << show(got) << "\n  PyTorch:" << show(want) << showInputs(inputs);
    return;
  }
  // Long tensors: the first positions that differ, with the inputs there.
  const torch::Tensor a = got.to(torch::kFloat64).flatten(), b = want.to(torch::kFloat64).flatten();
  const double scale = b.isfinite().any().item<bool>() ? b.masked_select(b.isfinite()).abs().max().item<double>() : 0;
  std::ostringstream o;
  int shown = 0;
  for (int64_t i = 0; i < b.numel() && shown < 8; ++i) {
    const double x = a[i].item<double>(), y = b[i].item<double>();
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    if (std::isfinite(x - y) && std::fabs(x - y) <= tol * std::max(scale, 1e-300)) continue;
    o << "\n  [" << i << "] Kiln " << x << ", PyTorch " << y;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].numel() == b.numel()) o << ", input " << k << " " << inputs[k].flatten()[i].item<double>();
    ++shown;
  }
  ADD_FAILURE() << what << ": relative max error " << err << " (inf: NaN or infinities differ)" << o.str();
}

}  // namespace

void compareSides(const Sides& got, const Sides& want, double tol, const std::string& what, const Ts& inputs) {
  ASSERT_GE(got.outputs.size(), want.outputs.size()) << what;
  for (size_t k = 0; k < want.outputs.size(); ++k)
    expectAgree(got.outputs[k], want.outputs[k], tol, what + ": output " + std::to_string(k), inputs);
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    const std::string gi = what + ": gradient of differentiated input " + std::to_string(i);
    if (!want.grads[i].defined()) {
      EXPECT_FALSE(got.grads[i].defined()) << gi << ": PyTorch has none";
      continue;
    }
    if (!got.grads[i].defined()) {
      ADD_FAILURE() << gi << ": Kiln has none";
      continue;
    }
    expectAgree(got.grads[i], want.grads[i], tol, gi, inputs);
  }
}

void check(const GradCase& c, torch::ScalarType dtype) {
  const double tol = dtype == torch::kFloat64 ? c.tol64 : c.tol32;
  const std::string what = c.op + (c.label.empty() ? "" : " (" + c.label + ")") + " " + c10::toString(dtype);
  SCOPED_TRACE(what);
  const Ts inputs = drawInputs(c, dtype);
  Ts weights;
  Sides want = torchSide(c, inputs, weights);
  Sides got = kilnSide(c, inputs, weights);
  if (got.outputs.empty()) return;  // kilnSide said why
  compareSides(got, want, tol, what, inputs);
}

void checkAll(const std::vector<GradCase>& cases) {
  for (const GradCase& c : cases)
    for (torch::ScalarType dtype : {torch::kFloat64, torch::kFloat32}) check(c, dtype);
}

}  // namespace kiln::testing
