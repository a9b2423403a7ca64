// libFuzzer target for the FX importer (importFxJson) with a tiny weight map:
// whatever the JSON holds, the importer must return a Model or a one-line
// Error -- never crash, hang, or allocate without bound. An accepted model
// must also have every graph input it declares and pass the verifier (which
// importFxJson runs); a message with a newline is a bug.
#include <cstdlib>
#include <string>

#include "core/import/fx/fx_importer.h"
#include "core/verifier.h"

namespace {

/// The weights the seed corpus (tests/fuzz/corpus/fx_json) refers to.
const kiln::TensorMap& weights() {
  static const kiln::TensorMap w = [] {
    kiln::TensorMap m;
    m["0.weight"] = kiln::Tensor(kiln::DType::F32, {3, 4});
    m["0.bias"] = kiln::Tensor(kiln::DType::F32, {3});
    for (const char* k : {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"})
      m[k] = kiln::Tensor(kiln::DType::F32, {3});
    m["bn.num_batches_tracked"] = kiln::Tensor(kiln::DType::I64, {});
    m["__constant__._tensor_constant0"] = kiln::Tensor::scalar(kiln::DType::F32, 2);
    return m;
  }();
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto model = kiln::importFxJson(text, weights(), "fuzz.fx.json");
  if (!model.ok()) {
    if (model.error().message.find('\n') != std::string::npos) std::abort();  // errors are one line
    return 0;
  }
  if (!kiln::verify(model->graph).ok()) std::abort();
  for (const kiln::Value* v : model->graph.inputs())
    if (v->role() != kiln::ValueRole::Data && !model->weights.count(v->name())) std::abort();  // unbound weight
  return 0;
}
