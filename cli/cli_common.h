// Helpers shared by the kiln subcommands: model loading with input shapes,
// reading batches, and the one-line error convention.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "core/import/import_options.h"
#include "core/model.h"
#include "core/result.h"
#include "core/tensor.h"

namespace CLI {
class App;
}

namespace kiln::cli {

/// How the user described the model's data inputs.
struct ModelArgs {
  std::string path;
  std::vector<std::string> input_shapes;  ///< "f32[1,3,64,64]" or "1x3x64x64"
  std::string input_file;                 ///< safetensors with input0, input1, ...
  bool train = false;
};

/// Data tensors input0, input1, ... from a safetensors file, in order.
Result<std::vector<Tensor>> readInputs(const std::string& path);
/// Import (TorchScript or FX) and verify.
/// The model of `args`, imported and verified. `unsupported`: kiln check's
/// list (ImportOptions::unsupported).
Result<Model> loadAndVerify(const ModelArgs& args, std::vector<UnsupportedOp>* unsupported = nullptr);
/// The model options (path, --input-shape, --input-file, --train) on `sub`.
void addModelOptionsTo(CLI::App* sub, ModelArgs& a);
/// Print "kiln: error: MESSAGE" (first line only for multi-line messages,
/// unless verbose) and return the exit code 1.
int reportError(const Error& e, bool verbose = false);
/// Put `prefix` before every error reportError prints from now on (a rank
/// of a data-parallel run: "rank 2: ").
void setErrorPrefix(std::string prefix);
/// A stream that drops what is written to it (the quiet ranks of a run).
std::ostream& nullStream();
/// "12.3 MFLOP", "1.2 GB".
std::string humanCount(double v, const char* unit);
/// A size in bytes: "1500000000", "512MiB", "2GiB", "1.5GB", "64 KiB"
/// (K/M/G/T powers of 1000, Ki/Mi/Gi/Ti of 1024; the B and case optional).
Result<uint64_t> parseByteSize(const std::string& text);

}  // namespace kiln::cli
