#include "cli/cli_common.h"

#include <cctype>

#include <cstdio>
#include <iostream>

#include "core/graph_json.h"
#include "core/import/loader/load_model.h"
#include "core/safetensors.h"
#include "core/verifier.h"

namespace kiln::cli {

namespace {
Result<TensorType> parseShapeArg(const std::string& s) {
  if (s.find('[') != std::string::npos) return parseTensorType(s);
  // "1x3x64x64" -> f32[1,3,64,64]
  std::string dims = s;
  for (char& c : dims)
    if (c == 'x') c = ',';
  auto t = parseTensorType("f32[" + dims + "]");
  if (!t.ok()) return Error{"bad --input-shape '" + s + "'; write it as 1x3x64x64 or i64[2,16]"};
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

Result<Model> loadAndVerify(const ModelArgs& args, std::vector<UnsupportedOp>* unsupported) {
  ImportOptions opts;
  opts.training = args.train;
  opts.unsupported = unsupported;
  for (const auto& s : args.input_shapes) {
    auto t = parseShapeArg(s);
    if (!t.ok()) return t.error();
    opts.input_types.push_back(*t);
  }
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

namespace {
std::string g_error_prefix;
}  // namespace

void setErrorPrefix(std::string prefix) { g_error_prefix = std::move(prefix); }

std::ostream& nullStream() {
  static std::ostream null(nullptr);  // no buffer: every write fails silently
  return null;
}

int reportError(const Error& e, bool verbose) {
  std::string msg = g_error_prefix + e.message;
  if (!verbose) {
    size_t nl = msg.find('\n');
    if (nl != std::string::npos) msg = msg.substr(0, nl) + " (run with --verbose for details)";
  }
  std::cerr << "kiln: error: " << msg << "\n";
  return 1;
}

Result<uint64_t> parseByteSize(const std::string& text) {
  const Error bad{"'" + text + "' is not a size; write bytes or a number with a unit, like 512MiB, 2GiB or 1.5GB"};
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    return bad;
  }
  std::string unit;
  for (char c : text.substr(used))
    if (c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"k", 1e3},       {"m", 1e6},       {"g", 1e9},       {"t", 1e12},
      {"ki", 1024.0},   {"mi", 1048576.0}, {"gi", 1073741824.0}, {"ti", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits)
    if (unit == name) {
      const double bytes = number * scale;
      if (!(bytes >= 1) || bytes > 1.8e19) return bad;
      return static_cast<uint64_t>(bytes);
    }
  return bad;
}

std::string humanCount(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, i ? "%.2f %s%s" : "%.0f %s%s", v, prefixes[i], unit);
  return buf;
}

}  // namespace kiln::cli
