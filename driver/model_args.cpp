#include "driver/model_args.h"


#include "core/graph_json.h"
#include "core/import/loader/load_model.h"
#include "core/safetensors.h"
#include "core/verifier.h"

#include <CLI/CLI.hpp>

namespace kiln::driver {

namespace {
Result<TensorType> parseShapeArg(const std::string& s) {
  const bool typed = s.find('[') != std::string::npos;
  // "1x3x64x64" -> f32[1,3,64,64]
  std::string dims = s;
  for (char& c : dims)
    if (c == 'x') c = ',';
  auto t = parseTensorType(typed ? s : "f32[" + dims + "]");
  if (!t.ok())
    return Error{"bad --input-shape '" + s + "' (" + t.error().message + "); write it as 1x3x64x64 or i64[2,16]"};
  return t;
}
}  // namespace

Result<std::vector<Tensor>> readInputs(const std::string& path) {
  auto file = readSafetensors(path);
  if (!file.ok()) return file.error();
  std::vector<Tensor> inputs;
  for (size_t i = 0;; ++i) {
    auto it = file->tensors.find("input" + std::to_string(i));
    if (it == file->tensors.end()) break;
    inputs.push_back(it->second);
  }
  if (inputs.empty()) return Error{path + ": holds no tensor named input0 (inputs are keyed input0, input1, ...)"};
  return inputs;
}

Result<std::vector<TensorType>> parseInputShapes(const std::vector<std::string>& shapes) {
  std::vector<TensorType> types;
  for (const auto& s : shapes) {
    auto t = parseShapeArg(s);
    if (!t.ok()) return t.error();
    types.push_back(*t);
  }
  return types;
}

Result<Model> loadAndVerify(const ModelArgs& args, std::vector<UnsupportedOp>* unsupported) {
  ImportOptions opts;
  opts.training = args.train;
  opts.unsupported = unsupported;
  auto types = parseInputShapes(args.input_shapes);
  if (!types) return types.error();
  opts.input_types = std::move(*types);
  if (!args.input_file.empty() && opts.input_types.empty()) {
    auto inputs = readInputs(args.input_file);
    if (!inputs.ok()) return inputs.error();
    for (const Tensor& t : *inputs) opts.input_types.push_back(t.type());
  }
  auto model = loadModel(args.path, opts);
  if (!model.ok()) return model;
  Status s = verify(model->graph);
  if (!s.ok()) return Error{args.path + ": imported graph is invalid (a Kiln bug): " + s.error().message};
  return model;
}

void addModelOptionsTo(CLI::App* sub, ModelArgs& a) {
  sub->add_option("model", a.path, "TorchScript archive (.pt) or FX dump (.fx.json)")->required();
  sub->add_option("--input-shape", a.input_shapes, "data input type, e.g. 1x3x64x64 or i64[2,16] (repeat per input)");
  sub->add_option("--input-file", a.input_file, "safetensors with input0, input1, ... (their types are used)");
  sub->add_flag("--train", a.train, "import in training mode");
}

}  // namespace kiln::driver
