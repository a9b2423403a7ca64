// One op (or one small graph) differentiated twice, by Kiln's autodiff on
// its CPU executor and by torch.autograd, with the same inputs and the same
// incoming gradient: the machinery shared by the gradient parity tests
// (grad_kernels_test.cpp on smooth inputs, grad_edge_values_test.cpp at the
// singular and boundary points).
//
// The loss is sum_k sum(out_k * W_k) with W_k drawn uniform in [-1, 1] (in
// float64, cast), so the incoming gradient is not all ones. Outputs and
// gradients are compared with the project's parity measure
// (core/tensor_compare.h): NaN must meet NaN and an infinity the same
// infinity, and the finite values agree to the case's tolerance.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/torch/torch_compare.h"

namespace kiln::testing {

using Ints = std::vector<int64_t>;
using Ts = std::vector<torch::Tensor>;
using I = int64_t;
using S = std::string;

inline constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

/// One input of a case: how to draw it (floating inputs in float64, cast to
/// the run's dtype, so both dtypes see the same values) and whether it is
/// differentiated (a Param on Kiln's side, requires_grad on PyTorch's).
struct Arg {
  std::function<torch::Tensor()> make;
  bool diff = true;
};

torch::Tensor uniform(const Ints& shape, double lo, double hi);

/// Uniform in [lo, hi] with values closer than `margin` to a kink pushed out
/// by `margin`, so neither side sits on a non-differentiable point.
Arg param(Ints shape, double lo = -2, double hi = 2, std::vector<double> kinks = {}, double margin = 0.1);
/// A floating input that is not differentiated (running statistics).
Arg buffer(Ints shape, double lo, double hi);
/// Integer indices in [0, n), duplicates likely.
Arg indices(Ints shape, int64_t n);
Arg mask(Ints shape);
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A float64 tensor of `values` in `shape` (1-D when empty).
torch::Tensor vals(std::vector<double> values, Ints shape = {});

/// `v` padded with 0.25 to a multiple of 64 elements. PyTorch's CPU
/// elementwise kernels run a vectorized loop over whole chunks and a scalar
/// one over the tail, and the two can disagree at NaN (hardtanh_backward's
/// vector mask drops a NaN's gradient, its scalar tail passes it): padding
/// puts every special value where the bulk of a real tensor is, in the
/// vectorized loop, for every vector width up to 64 floats.
torch::Tensor padded(std::vector<double> v);

/// Given values (integers and bools are data; floating ones are differentiated).
Arg fixed(torch::Tensor t);
/// Given floating values that are not differentiated.
Arg fixedData(torch::Tensor t);

/// PyTorch's side of a case, from the inputs: the output(s) that go into
/// the loss (Kiln's first outputs, in order). Accepts lambdas returning one
/// tensor or several.
struct TorchFn {
  std::function<Ts(const Ts&)> fn;
  template <class F>
  TorchFn(F f) {  // NOLINT(google-explicit-constructor): table entries are lambdas
    if constexpr (std::is_same_v<std::invoke_result_t<F, const Ts&>, torch::Tensor>)
      fn = [f](const Ts& x) { return Ts{f(x)}; };
    else
      fn = f;
  }
};

struct GradCase {
  std::string op;
  AttrMap attrs;
  std::vector<Arg> args;
  TorchFn torch;
  std::string label = "";  ///< tells cases of one op apart in failure messages
  double tol64 = 1e-12;
  double tol32 = 1e-5;
};

struct Sides {
  Ts outputs, grads;  ///< one grad per differentiated input (undefined: none)
};

/// PyTorch: (sum_k fn(x)_k * W_k).sum().backward(), with W_k drawn here
/// (after the inputs) unless `weights` is given.
Sides torchSide(const GradCase& c, const Ts& inputs, Ts& weights);

/// Kiln, on a forward graph already built: the loss sum_k sum(outs_k * W_k)
/// over the first weights.size() of `outs`, differentiate() w.r.t. `wrt`,
/// run on the CPU executor (one thread, so that a failure reproduces
/// exactly) with `bound`. Returns every value of `outs` and one gradient
/// per `wrt` entry (undefined where the loss does not depend on it). An
/// error is a test failure and an empty result.
Sides kilnRun(Graph& g, const std::vector<Value*>& outs, const std::vector<Value*>& wrt, TensorMap bound,
              const Ts& weights);

/// Kiln: one node `c.op` on the inputs (Param where differentiated), then kilnRun.
Sides kilnSide(const GradCase& c, const Ts& inputs, const Ts& weights);

/// The case's inputs in `dtype`, drawn after torch::manual_seed(2024).
Ts drawInputs(const GradCase& c, torch::ScalarType dtype);

/// Outputs and gradients of both sides agree to the dtype's tolerance
/// (NaN and infinities in the same places). `inputs` go into the message.
void compareSides(const Sides& got, const Sides& want, double tol, const std::string& what, const Ts& inputs);

/// One case in one dtype; checkAll: each case in float64 and float32.
void check(const GradCase& c, torch::ScalarType dtype);
void checkAll(const std::vector<GradCase>& cases);

}  // namespace kiln::testing
