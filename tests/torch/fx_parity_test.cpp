// FX import parity over the zoo: for every model `models/export.py --list`
// reports as exportable to fx, export it (NAME.fx.json + weights, inputs and
// PyTorch's outputs), import it with importFx, run it on the CPU executor and
// compare every output -- and in train mode every buffer, updated or not --
// with NAME.expected.safetensors: max|a-e| <= 1e-4 * max|e| (core/tensor_compare.h).
// The exports are shared with TorchScriptImportZoo (tests/torch/zoo_exports.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "core/import/fx/fx_importer.h"
#include "core/safetensors.h"
#include "core/tensor_compare.h"
#include "tests/torch/zoo_exports.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct ZooModel {
  std::string name;
  bool train = false;
};

/// Models whose formats column in `export.py --list` includes fx.
std::vector<ZooModel> fxZooModels() {
  const auto& entries = test::zooEntries();
  std::vector<ZooModel> models;
  if (entries)
    for (const test::ZooEntry& e : *entries)
      if (e.has("fx")) models.push_back({e.name, e.train});
  if (models.empty()) return {{"export_list_failed", false}};
  return models;
}

void PrintTo(const ZooModel& m, std::ostream* os) { *os << m.name << (m.train ? " (train)" : ""); }

class FxParity : public ::testing::TestWithParam<ZooModel> {};

TEST_P(FxParity, MatchesPyTorch) {
  const ZooModel& m = GetParam();
  ASSERT_NE(m.name, "export_list_failed") << "models/export.py --list failed or listed no fx models";
  const test::ZooExport exported = test::zooExport(m.name, "fx");
  ASSERT_TRUE(exported.ok) << "export failed:\n" << exported.log;
  const fs::path prefix = exported.prefix;

  ImportOptions options;
  options.training = m.train;
  auto model = importFx(prefix.string() + ".fx.json", options);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto inputs = readSafetensors(prefix.string() + ".input.safetensors");
  ASSERT_TRUE(inputs.ok()) << inputs.error().message;
  auto expected = readSafetensors(prefix.string() + ".expected.safetensors");
  ASSERT_TRUE(expected.ok()) << expected.error().message;

  std::vector<Tensor> data;
  for (size_t i = 0; inputs->tensors.count("input" + std::to_string(i)); ++i)
    data.push_back(inputs->tensors.at("input" + std::to_string(i)));
  auto exec = CpuExecutor::create(model->graph);
  ASSERT_TRUE(exec.ok()) << exec.error().message;
  auto outs = exec->runModel(*model, data);
  ASSERT_TRUE(outs.ok()) << outs.error().message;
  const auto& graph_outputs = model->graph.outputs();
  ASSERT_EQ(outs->size(), graph_outputs.size());

  // Kiln's value for every expected key: outputs, updated buffers, and
  // (train mode) buffers the forward leaves unchanged.
  std::map<std::string, Tensor> actual;
  for (size_t i = 0; i < graph_outputs.size(); ++i) {
    const GraphOutput& o = graph_outputs[i];
    actual[o.role == OutputRole::BufferUpdate ? "buffer:" + o.name : o.name] = (*outs)[i];
  }
  for (const auto& [key, t] : model->weights)
    if (!actual.count("buffer:" + key)) actual["buffer:" + key] = t;

  double worst = 0;
  for (const auto& [key, e] : expected->tensors) {
    auto it = actual.find(key);
    if (it == actual.end()) {
      ADD_FAILURE() << m.name << ": Kiln produced nothing for expected " << key;
      continue;
    }
    double err = parityError(it->second, e);
    worst = std::max(worst, err);
    EXPECT_LE(err, 1e-4) << m.name << " " << key << ": Kiln " << it->second.type().str() << " vs PyTorch "
                         << e.type().str() << ", relative error " << err;
  }
  std::printf("[fx parity] %-24s %-5s max relative error %.3g over %zu tensors\n", m.name.c_str(),
              m.train ? "train" : "eval", worst, expected->tensors.size());
  RecordProperty("max_relative_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Zoo, FxParity, ::testing::ValuesIn(fxZooModels()),
                         [](const ::testing::TestParamInfo<ZooModel>& info) { return info.param.name; });

}  // namespace
}  // namespace kiln
