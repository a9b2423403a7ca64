// FX import parity over the zoo: for every model `models/export.py --list`
// reports as exportable to fx, export it (NAME.fx.json + weights, inputs and
// PyTorch's outputs), import it with importFx, run it on the CPU executor and
// compare every output -- and in train mode every buffer, updated or not --
// with NAME.expected.safetensors: max|a-e| <= 1e-4 * max|e| (core/tensor_compare.h).
// Each model is exported once per test binary run (FxZoo caches the exports).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "core/file_io.h"
#include "core/import/fx/fx_importer.h"
#include "core/safetensors.h"
#include "core/tensor_compare.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct ZooModel {
  std::string name;
  bool train = false;
};

/// Run a shell command, capturing stdout+stderr; returns the exit status.
int runCommand(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  return pclose(p);
}

std::string exportScript() { return std::string(KILN_SOURCE_DIR) + "/models/export.py"; }

/// `export.py --list`, cached in KILN_WORK_DIR while newer than the zoo
/// scripts: the test list is built in every kiln_torch_tests process (ctest
/// runs one per test), and starting Python with torch costs seconds.
bool zooList(std::string* out) {
  fs::path cache = fs::path(KILN_WORK_DIR) / "fx_parity" / "export_list.txt";
  fs::path models = fs::path(KILN_SOURCE_DIR) / "models";
  std::error_code ec;
  auto cached = fs::last_write_time(cache, ec);
  bool fresh = !ec;
  for (const char* f : {"zoo.py", "export.py", "fx_dump.py"}) {
    auto t = fs::last_write_time(models / f, ec);
    fresh = fresh && !ec && t <= cached;
  }
  if (fresh) {
    std::ifstream in(cache);
    out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!out->empty()) return true;
  }
  if (runCommand(std::string(KILN_PYTHON) + " " + exportScript() + " --list", out) != 0) return false;
  fs::create_directories(cache.parent_path(), ec);
  std::ofstream(cache) << *out;
  return true;
}

/// Models whose formats column in `export.py --list` includes fx.
std::vector<ZooModel> fxZooModels() {
  std::string out;
  if (!zooList(&out)) return {{"export_list_failed", false}};
  std::vector<ZooModel> models;
  std::istringstream lines(out);
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name, mode, formats;
    if (!(words >> name >> mode >> formats)) continue;
    std::stringstream fmts(formats);
    for (std::string f; std::getline(fmts, f, ',');)
      if (f == "fx") models.push_back({name, mode == "train"});
  }
  if (models.empty()) return {{"export_list_failed", false}};
  return models;
}

/// The shared fixture: one export per model per binary run, into KILN_WORK_DIR/fx_parity.
class FxZoo {
 public:
  struct Export {
    bool ok = false;
    std::string log;  ///< export.py's output (for failures)
  };
  static const fs::path& dir() {
    static const fs::path d = fs::path(KILN_WORK_DIR) / "fx_parity";
    return d;
  }
  static const Export& get(const std::string& name) {
    static std::map<std::string, Export> cache;
    auto it = cache.find(name);
    if (it != cache.end()) return it->second;
    fs::create_directories(dir());
    Export e;
    std::string cmd = std::string(KILN_PYTHON) + " " + exportScript() + " " + name + " --format fx --out-dir " +
                      dir().string();
    e.ok = runCommand(cmd, &e.log) == 0;
    return cache.emplace(name, std::move(e)).first->second;
  }
};

void PrintTo(const ZooModel& m, std::ostream* os) { *os << m.name << (m.train ? " (train)" : ""); }

class FxParity : public ::testing::TestWithParam<ZooModel> {};

TEST_P(FxParity, MatchesPyTorch) {
  const ZooModel& m = GetParam();
  ASSERT_NE(m.name, "export_list_failed") << "models/export.py --list failed or listed no fx models";
  const auto& exported = FxZoo::get(m.name);
  ASSERT_TRUE(exported.ok) << "export failed:\n" << exported.log;
  fs::path prefix = FxZoo::dir() / m.name;

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
