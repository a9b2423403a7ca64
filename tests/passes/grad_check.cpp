#include "tests/passes/grad_check.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "backend/cpu/cpu_executor.h"
#include "core/ir.h"
#include "core/op_table.h"
#include "passes/autodiff.h"

namespace kiln::testing {
namespace {

Tensor randomTensor(const TensorType& t, double lo, double hi, const std::vector<double>& kinks, double margin,
                    std::mt19937_64& rng) {
  Tensor out(t);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < out.numel(); ++i) {
    double v;
    do {
      v = u(rng);
    } while (std::any_of(kinks.begin(), kinks.end(), [&](double k) { return std::abs(v - k) < margin; }));
    out.set(i, v);
  }
  return out;
}

}  // namespace

::testing::AssertionResult checkGrad(const GradCase& c) {
  std::mt19937_64 rng(c.seed);
  Graph g;
  std::vector<Value*> ins, wrt;
  TensorMap bound;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    std::string name = "x" + std::to_string(i);
    bool fixed = c.fixed.count(i) != 0;
    bool diff = !fixed && isFloating(c.inputs[i].dtype) &&
                std::find(c.no_grad.begin(), c.no_grad.end(), i) == c.no_grad.end();
    Value* v = g.addInput(name, c.inputs[i], diff ? ValueRole::Param : ValueRole::Data);
    ins.push_back(v);
    if (diff) {
      wrt.push_back(v);
    }
    if (fixed) {
      bound[name] = c.fixed.at(i);
    } else {
      auto r = c.ranges.count(i) ? c.ranges.at(i) : std::make_pair(c.lo, c.hi);
      bound[name] = randomTensor(c.inputs[i], r.first, r.second, c.kinks, c.kink_margin, rng);
    }
  }
  Node* n = nullptr;
  try {
    n = g.create(c.op, ins, c.attrs);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << c.op << ": cannot build the node: " << e.what();
  }
  std::vector<size_t> outs = c.loss_outputs;
  if (outs.empty())
    for (size_t j = 0; j < n->numOutputs(); ++j)
      if (isFloating(n->output(j)->dtype())) outs.push_back(j);
  Value* loss = nullptr;
  for (size_t j : outs) {
    Value* o = n->output(j);
    std::string wname = "w" + std::to_string(j);
    Value* w = g.addInput(wname, o->type(), ValueRole::Data);
    bound[wname] = randomTensor(o->type(), -1, 1, {}, 0, rng);
    Value* term = g.add("sum", {g.add("mul", {o, w})});
    loss = loss ? g.add("add", {loss, term}) : term;
  }
  if (!loss) return ::testing::AssertionFailure() << c.op << ": no floating output to differentiate";
  g.addOutput(loss, "loss", OutputRole::Loss);
  std::vector<std::string> names;
  for (Value* v : wrt) names.push_back(v->name());
  auto r = checkGraphGrad(g, bound, names, c.eps, c.tol, c.seed);
  if (!r) return ::testing::AssertionFailure() << c.op << ": " << r.message();
  return r;
}

::testing::AssertionResult checkGraphGrad(Graph& g, const TensorMap& bound, const std::vector<std::string>& names,
                                          double eps, double tol, uint64_t seed) {
  Value* loss = nullptr;
  for (const GraphOutput& o : g.outputs())
    if (o.role == OutputRole::Loss) loss = o.value;
  std::vector<Value*> wrt;
  for (const std::string& n : names) {
    Value* v = g.findInput(n);
    if (!v) return ::testing::AssertionFailure() << "no graph input '" << n << "'";
    wrt.push_back(v);
  }
  size_t loss_index = 0;
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputs()[i].value == loss) loss_index = i;
  size_t first_grad = g.outputs().size();
  auto grads = differentiate(g, loss, wrt);
  if (!grads) return ::testing::AssertionFailure() << grads.error().message;
  for (size_t k = 0; k < wrt.size(); ++k) {
    Value* gv = (*grads)[k];
    if (!gv) gv = g.add("full", {}, {{"shape", wrt[k]->shape()}, {"value", 0.0}, {"dtype", wrt[k]->dtype()}});
    g.addOutput(gv, "grad:" + wrt[k]->name(), OutputRole::Gradient);
  }

  // A fresh executor per evaluation: random ops (dropout) then draw the same
  // numbers every time.
  auto evaluate = [&](const TensorMap& inputs) -> Result<std::vector<Tensor>> {
    auto ex = CpuExecutor::create(g, {.seed = seed, .num_threads = 1});
    if (!ex) return ex.error();
    return ex->run(inputs);
  };
  auto base = evaluate(bound);
  if (!base) return ::testing::AssertionFailure() << base.error().message;

  std::ostringstream report;
  bool ok = true;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const Tensor& analytic = (*base)[first_grad + k];
    const std::string& name = wrt[k]->name();
    const Tensor& x = bound.at(name);
    double max_err = 0, max_num = 0, worst_a = 0, worst_n = 0;
    int64_t worst = -1;
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = x.at(i);
      TensorMap in = bound;
      Tensor xp = x.clone();
      xp.set(i, orig + eps);
      in[name] = xp;
      auto lp = evaluate(in);
      Tensor xm = x.clone();
      xm.set(i, orig - eps);
      in[name] = xm;
      auto lm = evaluate(in);
      if (!lp || !lm) return ::testing::AssertionFailure() << (lp ? lm : lp).error().message;
      double num = ((*lp)[loss_index].at(0) - (*lm)[loss_index].at(0)) / (2 * eps);
      double a = analytic.at(i);
      max_num = std::max(max_num, std::abs(num));
      double err = std::abs(a - num);
      if (std::isnan(err)) err = INFINITY;
      if (worst < 0 || err > max_err) {
        max_err = err;
        worst = i;
        worst_a = a;
        worst_n = num;
      }
    }
    double rel = max_err / std::max(1.0, max_num);
    if (!(rel <= tol)) {
      ok = false;
      report << " " << name << " " << wrt[k]->type().str() << ": error " << rel << " at element " << worst
             << " (analytic " << worst_a << ", numeric " << worst_n << ");";
    }
  }
  if (!ok) return ::testing::AssertionFailure() << "gradient mismatch:" << report.str();
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
