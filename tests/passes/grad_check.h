// Finite-difference check of one op's gradient rule, in double precision.
//
// Builds `op(inputs...)`, reduces every floating output to a scalar loss
// with fixed random weights (loss = sum_j sum(out_j * w_j)), differentiates
// it with the autodiff pass, runs the graph on the CPU executor and compares
// each analytical input gradient with central differences of the loss.
//
//   GradCase c{"gelu", {{"approximate", std::string("tanh")}}, {f64({4, 5})}};
//   EXPECT_TRUE(checkGrad(c));
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/attribute.h"
#include "core/ir.h"
#include "core/tensor.h"

namespace kiln::testing {

struct GradCase {
  std::string op;
  AttrMap attrs;
  /// One type per input. Floating inputs are drawn uniformly from
  /// [lo, hi] and differentiated unless listed in `fixed` or `no_grad`.
  std::vector<TensorType> inputs;
  /// Inputs with given values (indices, masks, targets); never differentiated.
  std::map<size_t, Tensor> fixed;
  /// Floating inputs that must not be differentiated (e.g. running stats).
  std::vector<size_t> no_grad;
  /// Outputs that feed the loss (empty: every floating output). BatchNorm's
  /// running-stat outputs, for instance, carry no gradient in PyTorch.
  std::vector<size_t> loss_outputs;
  double lo = -2, hi = 2;
  /// Per-input value range overrides (e.g. positive variance).
  std::map<size_t, std::pair<double, double>> ranges;
  /// Keep inputs away from kinks: resample elements closer than this to any
  /// of `kinks` (e.g. 0 for relu/abs).
  std::vector<double> kinks;
  double kink_margin = 1e-3;
  double eps = 1e-6;
  /// Allowed max|analytic - numeric| / max(1, max|numeric|) per input.
  double tol = 1e-6;
  uint64_t seed = 1;
};

/// f64 tensor type shorthand.
inline TensorType f64(Shape s) { return {DType::F64, std::move(s)}; }

/// Runs the check; the failure message names the input, the element, and the
/// analytical and numerical values.
::testing::AssertionResult checkGrad(const GradCase& c);

/// The same check on a whole graph: `g` has a Loss output (0-d) and its
/// inputs are bound by `inputs`; every input named in `wrt` is compared with
/// central differences. `g` gets the gradient nodes and outputs appended.
::testing::AssertionResult checkGraphGrad(Graph& g, const TensorMap& inputs, const std::vector<std::string>& wrt,
                                          double eps = 1e-6, double tol = 1e-6, uint64_t seed = 1);

}  // namespace kiln::testing
