// Test helpers for comparing Kiln against libtorch: tensor conversion, running
// a one-node graph on the CPU executor, and tolerance checks.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "core/ir.h"
#include "core/tensor.h"

namespace kiln::testing {

torch::ScalarType toTorchDType(DType t);
DType fromTorchDType(torch::ScalarType t);
/// Deep copies both ways (contiguous).
torch::Tensor toTorch(const Tensor& t);
Tensor fromTorch(const torch::Tensor& t);

/// Build a graph with one data input per tensor in `inputs` (input0, ...),
/// one node `op` with `attrs`, all of its outputs as graph outputs; run it on
/// the CPU executor and return the outputs as torch tensors. Fails the test
/// (ADD_FAILURE) and returns {} on any error. `dialects` restricts the
/// kernels (e.g. {"cpu"}: the reference loops); empty: the default choice.
std::vector<torch::Tensor> runOp(const std::string& op, const std::vector<torch::Tensor>& inputs,
                                 const AttrMap& attrs = {}, const std::vector<std::string>& dialects = {});

/// The project's parity measure, max |a - b| / max |b| (core/tensor_compare.h).
double relativeMaxError(const torch::Tensor& actual, const torch::Tensor& expected);

/// EXPECT that shapes and dtypes match and relativeMaxError <= tol
/// (exact equality for integer and bool tensors).
void expectClose(const torch::Tensor& actual, const torch::Tensor& expected, double tol = 1e-5,
                 const std::string& what = "");

}  // namespace kiln::testing
