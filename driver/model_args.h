// The model a front end names: its path and how its data inputs are typed
// (--input-shape, --input-file), imported and verified.
#pragma once

#include <string>
#include <vector>

#include "core/import/import_options.h"
#include "core/model.h"
#include "core/result.h"
#include "core/tensor.h"

namespace CLI {
class App;
}

namespace kiln::driver {

/// How the user described the model's data inputs.
struct ModelArgs {
  std::string path;
  std::vector<std::string> input_shapes;  ///< "f32[1,3,64,64]" or "1x3x64x64"
  std::string input_file;                 ///< safetensors with input0, input1, ...
  bool train = false;
};

/// Data tensors input0, input1, ... from a safetensors file, in order.
Result<std::vector<Tensor>> readInputs(const std::string& path);
/// --input-shape values ("1x3x64x64", "i64[2,16]") as types.
Result<std::vector<TensorType>> parseInputShapes(const std::vector<std::string>& shapes);
/// The model of `args`, imported (TorchScript or FX) and verified.
/// `unsupported`: kiln check's list (ImportOptions::unsupported).
Result<Model> loadAndVerify(const ModelArgs& args, std::vector<UnsupportedOp>* unsupported = nullptr);
/// The model options (path, --input-shape, --input-file, --train) on `sub`.
void addModelOptionsTo(CLI::App* sub, ModelArgs& a);

}  // namespace kiln::driver
