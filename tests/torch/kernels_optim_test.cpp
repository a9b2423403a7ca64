// The CPU adam_update and sgd_update kernels (backend/cpu/kernels_optim.cpp)
// run as one node with fresh outputs (the out-of-place path; training steps
// update in place, covered by the tests/train parity runs) against
// torch.optim's single-tensor arithmetic on the same tensors: AdamW, Adam
// with coupled weight decay and without; SGD with and without weight decay,
// momentum (first and later steps), dampening, Nesterov; a gradient scale,
// f32 and f64, lengths that leave vector tails; AdamW reading amp's bf16
// gradient of an f32 parameter (passes/fuse.cpp's cast fold) as its f32
// cast, bit for bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

struct AdamCase {
  double wd;
  bool decoupled;
};

void runAdam(const AdamCase& c, torch::ScalarType dt, int64_t n, double tol) {
  torch::manual_seed(31);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, step = 3, gs = 0.5;
  auto p = torch::randn({n}, torch::kFloat64).to(dt), g = torch::randn({n}, torch::kFloat64).to(dt);
  auto m = (0.1 * torch::randn({n}, torch::kFloat64)).to(dt);
  auto v = (0.01 * torch::randn({n}, torch::kFloat64).abs() + 1e-4).to(dt);
  // torch.optim._single_tensor_adam, step by step, in the tensors' dtype.
  auto grad = g * gs, param = p.clone();
  if (c.decoupled)
    param.mul_(1 - lr * c.wd);
  else if (c.wd != 0)
    grad = grad.add(param, c.wd);
  auto m_ref = m.clone().mul_(b1).add_(grad, 1 - b1);
  auto v_ref = v.clone().mul_(b2).addcmul_(grad, grad, 1 - b2);
  const double bias1 = 1 - std::pow(b1, step), bias2 = 1 - std::pow(b2, step);
  auto denom = (v_ref.sqrt() / std::sqrt(bias2)).add_(eps);
  auto p_ref = param.addcdiv(m_ref, denom, -lr / bias1);

  auto scalar = [](double x, torch::ScalarType t) { return torch::tensor(x, torch::TensorOptions().dtype(t)); };
  AttrMap attrs = {{"weight_decay", c.wd}, {"decoupled", int64_t{c.decoupled}}};
  auto out = runOp("adam_update",
                   {scalar(lr, torch::kFloat64), scalar(step, torch::kFloat64), scalar(gs, torch::kFloat32), p, g, m, v},
                   attrs);
  ASSERT_EQ(out.size(), 3u);
  expectClose(out[0], p_ref, tol, "param");
  expectClose(out[1], m_ref, tol, "exp_avg");
  expectClose(out[2], v_ref, tol, "exp_avg_sq");
}

TEST(KernelsOptim, AdamUpdateReadsBf16GradientsAsTheirF32Cast) {
  for (int64_t n : {1, 7, 8, 1000, 70001}) {
    SCOPED_TRACE("n " + std::to_string(n));
    torch::manual_seed(5);
    auto p = torch::randn({n}), m = 0.1 * torch::randn({n}), v = 0.01 * torch::randn({n}).abs() + 1e-4;
    auto g = torch::randn({n}).to(torch::kBFloat16);
    auto scalar = [](double x, torch::ScalarType t) { return torch::tensor(x, torch::TensorOptions().dtype(t)); };
    const AttrMap attrs = {{"weight_decay", 0.01}, {"decoupled", int64_t{1}}};
    auto run = [&](const torch::Tensor& grad) {
      return runOp("adam_update",
                   {scalar(1e-2, torch::kFloat64), scalar(3, torch::kFloat64), scalar(0.5, torch::kFloat32), p, grad,
                    m, v},
                   attrs);
    };
    auto widened = run(g), cast = run(g.to(torch::kFloat32));
    ASSERT_EQ(widened.size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(torch::equal(widened[k], cast[k])) << "output " << k;
  }
}

TEST(KernelsOptim, AdamUpdateOutOfPlaceMatchesTorchOptim) {
  for (AdamCase c : {AdamCase{0.01, true}, AdamCase{0.01, false}, AdamCase{0.0, false}})
    for (int64_t n : {1, 7, 8, 1000, 70001}) {
      SCOPED_TRACE("wd " + std::to_string(c.wd) + (c.decoupled ? " decoupled" : "") + " n " + std::to_string(n));
      runAdam(c, torch::kFloat64, n, 1e-15);
      runAdam(c, torch::kFloat32, n, 1e-6);
    }
}

struct SgdCase {
  double wd, momentum, dampening;
  bool nesterov;
  double step;
};

void runSgd(const SgdCase& c, torch::ScalarType dt, int64_t n, double tol) {
  torch::manual_seed(32);
  const double lr = 1e-2, gs = 0.5;
  auto p = torch::randn({n}, torch::kFloat64).to(dt), g = torch::randn({n}, torch::kFloat64).to(dt);
  auto buf = torch::randn({n}, torch::kFloat64).to(dt);
  // torch.optim._single_tensor_sgd.
  auto d = g * gs;
  if (c.wd != 0) d = d.add(p, c.wd);
  torch::Tensor buf_ref;
  if (c.momentum != 0) {
    buf_ref = c.step <= 1 ? d.clone() : buf.clone().mul_(c.momentum).add_(d, 1 - c.dampening);
    d = c.nesterov ? d.add(buf_ref, c.momentum) : buf_ref;
  }
  auto p_ref = p.add(d, -lr);

  auto scalar = [](double x, torch::ScalarType t) { return torch::tensor(x, torch::TensorOptions().dtype(t)); };
  AttrMap attrs = {{"weight_decay", c.wd},
                   {"momentum", c.momentum},
                   {"dampening", c.dampening},
                   {"nesterov", int64_t{c.nesterov}}};
  std::vector<torch::Tensor> ins = {scalar(lr, torch::kFloat64), scalar(c.step, torch::kFloat64),
                                    scalar(gs, torch::kFloat32), p, g};
  if (c.momentum != 0) ins.push_back(buf);
  auto out = runOp("sgd_update", ins, attrs);
  ASSERT_EQ(out.size(), c.momentum != 0 ? 2u : 1u);
  expectClose(out[0], p_ref, tol, "param");
  if (c.momentum != 0) expectClose(out[1], buf_ref, tol, "momentum_buffer");
}

TEST(KernelsOptim, SgdUpdateOutOfPlaceMatchesTorchOptim) {
  for (SgdCase c : {SgdCase{0, 0, 0, false, 3}, SgdCase{0.01, 0, 0, false, 3}, SgdCase{0.01, 0.9, 0.1, false, 1},
                    SgdCase{0.01, 0.9, 0.1, false, 3}, SgdCase{0, 0.9, 0, true, 3}, SgdCase{0.01, 0.9, 0, true, 1}})
    for (int64_t n : {1, 7, 8, 1000, 70001}) {
      SCOPED_TRACE("wd " + std::to_string(c.wd) + " momentum " + std::to_string(c.momentum) +
                   (c.nesterov ? " nesterov" : "") + " step " + std::to_string(c.step) + " n " + std::to_string(n));
      runSgd(c, torch::kFloat64, n, 1e-15);
      runSgd(c, torch::kFloat32, n, 1e-6);
    }
}

}  // namespace
}  // namespace kiln::testing
