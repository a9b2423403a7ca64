// TorchScript importer tests against PyTorch.
//
// gen_ts_cases.py (run with KILN_PYTHON into KILN_WORK_DIR) writes tiny traced
// and scripted modules, one per aten op family and importer feature, with
// their inputs and PyTorch's outputs. TorchScriptImportCase imports each,
// runs it on the CPU executor and compares; TorchScriptImportStructure checks
// what the graph looks like (state_dict names, tied weights, BatchNorm buffer
// updates, scopes, no shape arithmetic left); TorchScriptImportErrors feeds it
// bad files; TorchScriptImportZoo checks parity on every models/zoo.py model,
// exported by models/export.py (trace and script; tests/torch/zoo_exports.h).

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include <torch/script.h>
#include "backend/cpu/cpu_executor.h"
#include "core/import/fx/fx_importer.h"
#include "core/import/torchscript/lowering.h"
#include "core/import/torchscript/torchscript_importer.h"
#include "core/safetensors.h"
#include "tests/torch/torch_compare.h"
#include "tests/torch/zoo_exports.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::FileLock;
using test::freshFile;
using test::runShell;

const std::string kGenerator = std::string(KILN_SOURCE_DIR) + "/tests/torch/gen_ts_cases.py";
const std::string kExporter = std::string(KILN_SOURCE_DIR) + "/models/export.py";
const std::string kCaseDir = std::string(KILN_WORK_DIR) + "/torchscript_import/cases";

/// Whether KILN_PYTHON can import torch. A yes is remembered in the work dir
/// (importing torch takes seconds, and ctest starts one process per test).
bool pythonHasTorch() {
  static const bool ok = [] {
    const fs::path marker = std::string(KILN_WORK_DIR) + "/torchscript_import/python_has_torch";
    std::error_code ec;
    if (fs::exists(marker, ec)) return true;
    if (runShell(std::string(KILN_PYTHON) + " -c 'import torch' > /dev/null 2>&1") != 0) return false;
    fs::create_directories(marker.parent_path(), ec);
    std::ofstream(marker) << "yes\n";
    return true;
  }();
  return ok;
}

const char* kNoTorch = KILN_PYTHON " cannot import torch (install Debian's python3-torch)";

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

/// A list produced by a Python command, cached in `cache` while newer than `sources`.
std::vector<std::string> cachedList(const std::string& cache, const std::vector<fs::path>& sources,
                                    const std::string& cmd) {
  FileLock lock(cache + ".lock");
  if (!freshFile(cache, sources)) {
    std::string out;
    if (runShell(cmd + " 2>/dev/null", &out) != 0) return {};
    std::ofstream(cache) << out;
  }
  std::ifstream in(cache);
  std::stringstream ss;
  ss << in.rdbuf();
  return lines(ss.str());
}

// ---- Generated cases ------------------------------------------------------------------------

struct CaseInfo {
  std::string name, format, expect_error;
  bool run = true, train = false;
  std::optional<std::string> fx_error;  ///< with an FX form: "" or why make_fx could not capture it
};

/// Generate the cases (once per change of the generator) and read cases.json.
const std::map<std::string, CaseInfo>& cases(std::string* error = nullptr) {
  static std::map<std::string, CaseInfo> all;
  static std::string gen_error;
  static bool done = false;
  if (!done) {
    done = true;
    FileLock lock(kCaseDir + ".lock");
    fs::path manifest = kCaseDir + "/cases.json";
    if (!freshFile(manifest, {kGenerator, std::string(KILN_SOURCE_DIR) + "/models/st_io.py"})) {
      std::string out;
      int rc = runShell(std::string(KILN_PYTHON) + " " + kGenerator + " --out " + kCaseDir + " 2>&1", &out);
      if (rc != 0) gen_error = "gen_ts_cases.py failed:\n" + out;
    }
    std::ifstream in(manifest);
    if (in) {
      for (const auto& j : nlohmann::json::parse(in)) {
        CaseInfo c{j.at("name").get<std::string>(), j.at("format").get<std::string>(),
                   j.at("expect_error").get<std::string>(), j.at("run").get<bool>(), j.at("train").get<bool>()};
        if (j.contains("fx_error")) c.fx_error = j.at("fx_error").get<std::string>();
        all[c.name] = c;
      }
    }
  }
  if (error) *error = gen_error;
  return all;
}

std::vector<std::string> caseNames() {
  if (!pythonHasTorch()) return {"no_torch"};
  auto names = cachedList(std::string(KILN_WORK_DIR) + "/torchscript_import/case_names.txt", {kGenerator},
                          std::string(KILN_PYTHON) + " " + kGenerator + " --list");
  return names.empty() ? std::vector<std::string>{"generator_failed"} : names;
}

Result<Model> importCase(const std::string& name, ImportOptions options = {}) {
  return importTorchScript(kCaseDir + "/" + name + ".pt", options);
}

/// The generated cases must exist; skips when Python has no torch.
#define REQUIRE_CASES()                                 \
  do {                                                  \
    if (!pythonHasTorch()) GTEST_SKIP() << kNoTorch;    \
    std::string gen_error;                              \
    cases(&gen_error);                                  \
    if (!gen_error.empty()) ADD_FAILURE() << gen_error; \
  } while (0)

/// Run `model` on the tensors of `input_file` and compare every output with
/// `expected_file` (outputs as outputN, buffer updates as buffer:KEY).
/// Returns the largest relative error seen.
double runAndCompare(const Model& model, const std::string& input_file, const std::string& expected_file) {
  auto inputs = readSafetensors(input_file);
  auto expected = readSafetensors(expected_file);
  EXPECT_TRUE(inputs.ok()) << (inputs.ok() ? "" : inputs.error().message);
  EXPECT_TRUE(expected.ok()) << (expected.ok() ? "" : expected.error().message);
  if (!inputs.ok() || !expected.ok()) return INFINITY;
  std::vector<Tensor> data;
  for (size_t k = 0; inputs->tensors.count("input" + std::to_string(k)); ++k)
    data.push_back(inputs->tensors.at("input" + std::to_string(k)));
  auto exe = CpuExecutor::create(model.graph);
  EXPECT_TRUE(exe.ok()) << (exe.ok() ? "" : exe.error().message);
  if (!exe.ok()) return INFINITY;
  auto outs = exe->runModel(model, data);
  EXPECT_TRUE(outs.ok()) << (outs.ok() ? "" : outs.error().message);
  if (!outs.ok()) return INFINITY;
  const auto& gouts = model.graph.outputs();
  EXPECT_EQ(outs->size(), gouts.size());
  double worst = 0;
  size_t plain = 0;
  for (size_t k = 0; k < gouts.size() && k < outs->size(); ++k) {
    bool update = gouts[k].role == OutputRole::BufferUpdate;
    plain += update ? 0 : 1;
    std::string key = update ? "buffer:" + gouts[k].name : gouts[k].name;
    auto it = expected->tensors.find(key);
    if (it == expected->tensors.end()) {
      ADD_FAILURE() << "graph output " << key << " has no expected value";
      continue;
    }
    torch::Tensor a = testing::toTorch((*outs)[k]), e = testing::toTorch(it->second);
    testing::expectClose(a, e, 1e-4, key);
    if (a.sizes() != e.sizes() || a.scalar_type() != e.scalar_type()) {
      worst = INFINITY;
      continue;
    }
    worst = std::max(worst, testing::relativeMaxError(a, e));
  }
  size_t expected_plain = 0;
  for (const auto& [k, t] : expected->tensors) expected_plain += k.rfind("output", 0) == 0 ? 1 : 0;
  EXPECT_EQ(plain, expected_plain) << "number of forward outputs";
  return worst;
}

class TorchScriptImportCase : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchScriptImportCase, ImportsAndMatchesPyTorch) {
  REQUIRE_CASES();
  const std::string name = GetParam();
  auto it = cases().find(name);
  ASSERT_NE(it, cases().end()) << name << " is not in cases.json";
  const CaseInfo& c = it->second;
  ASSERT_TRUE(fs::exists(kCaseDir + "/" + name + ".pt")) << "gen_ts_cases.py did not write " << name;
  auto model = importCase(name);  // input types from the archive's kiln_inputs.json
  if (!c.expect_error.empty()) {
    ASSERT_FALSE(model.ok()) << name << " should not import";
    const std::string& msg = model.error().message;
    EXPECT_NE(msg.find(c.expect_error), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error must be one line: " << msg;
    return;
  }
  ASSERT_TRUE(model.ok()) << model.error().message;
  for (const auto& n : model->graph.nodes())
    EXPECT_FALSE(n->provenance().empty() && n->op() != "full") << n->describe() << " has no provenance";
  if (!c.run) return;  // random (dropout in train mode): import only
  double err = runAndCompare(*model, kCaseDir + "/" + name + ".input.safetensors",
                             kCaseDir + "/" + name + ".expected.safetensors");
  RecordProperty("max_relative_error", std::to_string(err));
}

INSTANTIATE_TEST_SUITE_P(Cases, TorchScriptImportCase, ::testing::ValuesIn(caseNames()),
                         [](const auto& info) { return info.param; });

// ---- The FX importer on the same cases --------------------------------------------------------

/// The generator's cases with an FX form: every function case and each
/// module's trace variant, dumped by models/fx_dump.py as NAME_fx.fx.json.
std::vector<std::string> fxCaseNames() {
  if (!pythonHasTorch()) return {"no_torch"};
  auto names = cachedList(std::string(KILN_WORK_DIR) + "/torchscript_import/fx_case_names.txt", {kGenerator},
                          std::string(KILN_PYTHON) + " " + kGenerator + " --list-fx");
  return names.empty() ? std::vector<std::string>{"generator_failed"} : names;
}

/// Cases whose FX dump the FX importer does not take yet, and why. The two
/// importers should accept the same models: the test fails when any other
/// case does not import through FX, and when one of these starts to (take
/// it off the list).
const std::map<std::string, std::string>& fxGaps() {
  static const std::map<std::string, std::string> gaps = {
      {"losses", "make_fx (torch 1.13) decomposes cross_entropy with label_smoothing into index_put and "
                 "masked_select, whose shape depends on the data"},
      {"losses_weighted_smoothing", "the same masked_select, for class weights with label smoothing"},
  };
  return gaps;
}

class FxImportCase : public ::testing::TestWithParam<std::string> {};

TEST_P(FxImportCase, ImportsWhatTheTorchScriptImporterImports) {
  REQUIRE_CASES();
  const std::string name = GetParam();
  auto it = cases().find(name);
  ASSERT_NE(it, cases().end()) << name << " is not in cases.json";
  const CaseInfo& c = it->second;
  ASSERT_TRUE(c.fx_error.has_value()) << name << " has no FX form in cases.json";
  if (!c.fx_error->empty()) GTEST_SKIP() << "make_fx cannot capture " << name << ": " << *c.fx_error;
  auto model = importFx(kCaseDir + "/" + name + "_fx.fx.json");
  auto gap = fxGaps().find(name);
  if (gap != fxGaps().end()) {
    EXPECT_FALSE(model.ok()) << name << " imports through FX now: take it off fxGaps() (" << gap->second << ")";
    return;
  }
  ASSERT_TRUE(model.ok()) << model.error().message;
  if (!c.run) return;
  double err = runAndCompare(*model, kCaseDir + "/" + name + ".input.safetensors",
                             kCaseDir + "/" + name + ".expected.safetensors");
  RecordProperty("max_relative_error", std::to_string(err));
}

INSTANTIATE_TEST_SUITE_P(Cases, FxImportCase, ::testing::ValuesIn(fxCaseNames()),
                         [](const auto& info) { return info.param; });

// ---- The two importers' tables ----------------------------------------------------------------

/// TorchScript ops with no FX overload for a reason other than PyTorch's
/// dispatch (which the test asks PyTorch about).
const std::map<std::string, std::string>& tsOnlyByDesign() {
  static const std::map<std::string, std::string> ops = {
      {"_pack_padded_sequence", "refused by the TorchScript importer too: packed sequences have a data-dependent shape"},
      {"_index_put_impl", "the in-place index_put_ of a trace; FX graphs hold its functional index_put"},
      {"copy_", "functionalization removes copies into graph tensors from FX graphs"},
  };
  return ops;
}

/// Every aten operator the TorchScript importer maps has its FX overloads
/// mapped too, unless no FX graph can contain it: PyTorch decomposes it
/// before make_fx records anything (CompositeImplicitAutograd for every
/// overload), it exists only in TorchScript (aten::Int, aten::size), it is an
/// in-place op whose functional form is mapped (relu_ -> relu), or
/// tsOnlyByDesign() says why.
TEST(ImporterTables, EveryTorchScriptOpIsMappedByTheFxImporter) {
  if (!pythonHasTorch()) GTEST_SKIP() << kNoTorch;
  std::set<std::string> fx_bases;  // aten.relu.default -> relu
  for (const std::string& op : fxSupportedOps()) {
    if (op.rfind("aten.", 0) != 0) continue;
    const size_t dot = op.find('.', 5);
    fx_bases.insert(op.substr(5, dot == std::string::npos ? std::string::npos : dot - 5));
  }
  std::vector<std::string> unmapped;
  for (const std::string& name : ts::atenRuleNames()) {
    ASSERT_EQ(name.rfind("aten::", 0), 0u) << name;
    std::string base = name.substr(6);
    if (fx_bases.count(base)) continue;
    if (base.size() > 1 && base.back() == '_' && fx_bases.count(base.substr(0, base.size() - 1))) continue;
    unmapped.push_back(base);
  }
  ASSERT_LT(unmapped.size(), 150u) << "the FX importer lost most of its table";
  std::string cmd = std::string(KILN_PYTHON) + " " + KILN_SOURCE_DIR + "/tests/torch/aten_dispatch.py";
  for (const std::string& b : unmapped) cmd += " " + b;
  std::string out;
  ASSERT_EQ(runShell(cmd, &out), 0) << cmd;
  std::istringstream lines(out);
  std::string name, kind;
  size_t decomposed = 0, answered = 0;
  while (lines >> name >> kind) {
    ++answered;
    if (kind == "composite" || kind == "jit_only") {
      ++decomposed;
      continue;
    }
    auto why = tsOnlyByDesign().find(name);
    if (why != tsOnlyByDesign().end()) continue;
    ADD_FAILURE() << "aten::" << name << " (" << kind
                  << " in PyTorch's dispatcher) has a TorchScript lowering but no FX overload mapped";
  }
  EXPECT_EQ(answered, unmapped.size()) << out;
  for (const auto& [op, why] : tsOnlyByDesign())
    EXPECT_NE(std::find(unmapped.begin(), unmapped.end(), op), unmapped.end())
        << op << " is mapped by both importers now: take it off tsOnlyByDesign() (" << why << ")";
  RecordProperty("ts_ops", static_cast<int>(ts::atenRuleNames().size()));
  RecordProperty("decomposed_before_fx", static_cast<int>(decomposed));
}

// ---- Structure --------------------------------------------------------------------------------

/// Every state_dict key of the archive, as PyTorch names them.
std::set<std::string> stateDictKeys(const std::string& path) {
  torch::jit::Module m = torch::jit::load(path);
  std::set<std::string> keys;
  for (const auto& p : m.named_parameters()) keys.insert(p.name);
  for (const auto& b : m.named_buffers()) keys.insert(b.name);
  return keys;
}

const Node* findNode(const Graph& g, const std::string& op, const std::string& scope) {
  for (const auto& n : g.nodes())
    if (n->op() == op && n->scope() == scope) return n.get();
  return nullptr;
}

TEST(TorchScriptImportStructure, ParamsAreNamedByStateDictKeys) {
  REQUIRE_CASES();
  for (const char* name : {"scopes_trace", "scopes_script", "batch_norm_eval_trace", "mha_script"}) {
    SCOPED_TRACE(name);
    auto model = importCase(name);
    ASSERT_TRUE(model.ok()) << model.error().message;
    std::set<std::string> keys = stateDictKeys(kCaseDir + "/" + std::string(name) + ".pt");
    for (Value* v : model->graph.inputs()) {
      if (v->role() == ValueRole::Param || v->role() == ValueRole::Buffer)
        EXPECT_TRUE(keys.count(v->name())) << v->name() << " is not a state_dict key";
      if (v->role() == ValueRole::Const) EXPECT_EQ(v->name().rfind("__const.", 0), 0u) << v->name();
    }
    std::set<std::string> have;
    for (const auto& [k, t] : model->stateDict()) have.insert(k);
    EXPECT_EQ(have, keys) << "Model::stateDict() must hold every state_dict key";
  }
  // Parameters are Params, running statistics Buffers.
  auto bn = importCase("batch_norm_eval_trace");
  ASSERT_TRUE(bn.ok()) << bn.error().message;
  EXPECT_EQ(bn->graph.findInput("0.weight")->role(), ValueRole::Param);
  EXPECT_EQ(bn->graph.findInput("0.running_mean")->role(), ValueRole::Buffer);
  EXPECT_EQ(bn->graph.findInput("0.num_batches_tracked"), nullptr) << "unused in eval mode";
}

TEST(TorchScriptImportStructure, WeightsAreGraphInputsOrStateDictKeys) {
  // A traced cell loop makes per-write element masks while walking; those the
  // rebuilt graph no longer reads must not stay in the model (they did: 264
  // MB on a 64-step LSTMCell loop, for the whole training run).
  REQUIRE_CASES();
  for (const char* name : {"rnn_cells_loop_trace", "scopes_trace"}) {
    SCOPED_TRACE(name);
    auto model = importCase(name);
    ASSERT_TRUE(model.ok()) << model.error().message;
    const std::set<std::string> keys = stateDictKeys(kCaseDir + "/" + std::string(name) + ".pt");
    for (const auto& [key, t] : model->weights)
      EXPECT_TRUE(keys.count(key) || model->graph.findInput(key)) << key << " is neither read nor a state_dict key";
  }
}

TEST(TorchScriptImportStructure, TiedWeightsAreOneInputWithAnAlias) {
  REQUIRE_CASES();
  for (const char* name : {"tied_weights_trace", "tied_weights_script"}) {
    SCOPED_TRACE(name);
    auto model = importCase(name);
    ASSERT_TRUE(model.ok()) << model.error().message;
    EXPECT_NE(model->graph.findInput("wte.weight"), nullptr);
    EXPECT_EQ(model->graph.findInput("lm_head.weight"), nullptr);
    ASSERT_EQ(model->aliases.count("lm_head.weight"), 1u);
    EXPECT_EQ(model->aliases.at("lm_head.weight"), "wte.weight");
    EXPECT_EQ(model->weights.count("lm_head.weight"), 0u);
    EXPECT_EQ(model->stateDict().count("lm_head.weight"), 1u);
    // Both uses (embedding and the head's linear) read the one input.
    EXPECT_EQ(model->graph.findInput("wte.weight")->uses().size(), 2u);
  }
}

TEST(TorchScriptImportStructure, EmbeddingKeepsPaddingAndScaleByFrequency) {
  REQUIRE_CASES();
  for (const char* name : {"embedding_freq_trace", "embedding_freq_script"}) {
    SCOPED_TRACE(name);
    auto model = importCase(name);
    ASSERT_TRUE(model.ok()) << model.error().message;
    const Node* emb = nullptr;
    for (const auto& n : model->graph.nodes())
      if (n->op() == "embedding") emb = n.get();
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->i("padding_idx"), 3);
    EXPECT_EQ(emb->i("scale_grad_by_freq"), 1);
  }
}

TEST(TorchScriptImportStructure, BatchNormTrainingUpdatesBuffers) {
  REQUIRE_CASES();
  for (const char* name : {"batch_norm_train_trace", "batch_norm_train_script"}) {
    SCOPED_TRACE(name);
    auto model = importCase(name);
    ASSERT_TRUE(model.ok()) << model.error().message;
    const auto& outs = model->graph.outputs();
    ASSERT_EQ(outs.size(), 4u);
    EXPECT_EQ(outs[0].name, "output0");
    EXPECT_EQ(outs[0].role, OutputRole::Output);
    std::vector<std::string> names;
    for (size_t k = 1; k < outs.size(); ++k) {
      EXPECT_EQ(outs[k].role, OutputRole::BufferUpdate);
      names.push_back(outs[k].name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
    const Node* bn = findNode(model->graph, "batch_norm", "");
    ASSERT_NE(bn, nullptr);
    EXPECT_EQ(bn->i("training"), 1);
  }
}

TEST(TorchScriptImportStructure, ScopesAreModulePaths) {
  REQUIRE_CASES();
  for (const char* name : {"scopes_trace", "scopes_script"}) {
    SCOPED_TRACE(name);
    auto model = importCase(name);
    ASSERT_TRUE(model.ok()) << model.error().message;
    const Graph& g = model->graph;
    EXPECT_NE(findNode(g, "conv2d", "layer1.0.conv1"), nullptr);
    EXPECT_NE(findNode(g, "conv2d", "layer1.1.conv1"), nullptr);
    EXPECT_NE(findNode(g, "batch_norm", "layer1.1.bn1"), nullptr);
    EXPECT_NE(findNode(g, "add", "layer1.0"), nullptr);
    EXPECT_NE(findNode(g, "linear", "h.0"), nullptr);
    EXPECT_NE(findNode(g, "linear", "h.1"), nullptr);
    const Node* conv = findNode(g, "conv2d", "layer1.0.conv1");
    ASSERT_NE(conv, nullptr);
    EXPECT_NE(conv->provenance().find(".py:"), std::string::npos) << conv->provenance();
  }
}

TEST(TorchScriptImportStructure, NoShapeArithmeticIsLeft) {
  REQUIRE_CASES();
  auto ops = [](const Model& m) {
    std::vector<std::string> v;
    for (const auto& n : m.graph.nodes()) v.push_back(n->op());
    return v;
  };
  auto a = importCase("view_size_arith");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(ops(*a), std::vector<std::string>{"reshape"});
  EXPECT_EQ(a->graph.outputs()[0].value->shape(), (Shape{2, 256}));
  auto b = importCase("view_floordiv");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(ops(*b), (std::vector<std::string>{"reshape", "slice"}));
  auto c = importCase("scripted_control_script");
  ASSERT_TRUE(c.ok()) << c.error().message;
  for (const std::string& op : ops(*c)) EXPECT_NE(op, "arange") << "no index arithmetic at run time";
}

TEST(TorchScriptImportStructure, InputTypesFromOptionsOverrideTheArchive) {
  REQUIRE_CASES();
  ImportOptions o;
  o.input_types = {{DType::F32, {5, 3, 4}}};
  auto model = importCase("linear_trace", o);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->graph.inputs()[0]->name(), "input0");
  EXPECT_EQ(model->graph.inputs()[0]->role(), ValueRole::Data);
  EXPECT_EQ(model->graph.outputs()[0].value->shape(), (Shape{5, 3, 5}));
}

TEST(TorchScriptImportStructure, UnsupportedOpNamesOpLocationAndScope) {
  REQUIRE_CASES();
  auto model = importCase("unsupported_op");
  ASSERT_FALSE(model.ok());
  const std::string& msg = model.error().message;
  EXPECT_EQ(msg.rfind(kCaseDir + "/unsupported_op.pt: unsupported op aten::lgamma at ", 0), 0u) << msg;
  EXPECT_NE(msg.find("gen_ts_cases.py:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(scope inner)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kiln ops"), std::string::npos) << msg;
}

// ---- Bad inputs ---------------------------------------------------------------------------------

void expectOneLineError(const std::string& path, const std::string& needle) {
  auto model = importTorchScript(path);
  ASSERT_FALSE(model.ok()) << path << " imported";
  const std::string& msg = model.error().message;
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u) << msg;
}

TEST(TorchScriptImportErrors, BadFilesGiveOneLineErrors) {
  REQUIRE_CASES();
  const std::string dir = std::string(KILN_WORK_DIR) + "/torchscript_import/bad";
  fs::create_directories(dir);
  expectOneLineError(dir + "/missing.pt", "no such file");
  std::ofstream(dir + "/empty.pt").close();
  expectOneLineError(dir + "/empty.pt", "empty file");
  std::ofstream(dir + "/text.pt") << "this is not a model\nsecond line\n";
  expectOneLineError(dir + "/text.pt", "not a readable TorchScript archive");
  {
    std::ifstream in(kCaseDir + "/linear_trace.pt", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 100u);
    std::ofstream(dir + "/truncated.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  expectOneLineError(dir + "/truncated.pt", "not a readable TorchScript archive");
  expectOneLineError(kCaseDir + "/not_torchscript.zip", "not a readable TorchScript archive");
  expectOneLineError(dir, "directory");
}

TEST(TorchScriptImportErrors, MissingInputShapesAskForThem) {
  REQUIRE_CASES();
  const std::string path = kCaseDir + "/no_inputs_json.pt";
  expectOneLineError(path, "the archive does not record input shapes; pass them (kiln: --input-file or --input-shape)");
  // Typed, so a front end can ask for them (kiln-studio does) without
  // reading the message.
  EXPECT_EQ(importTorchScript(path).error().kind, ErrorKind::kInputShapesMissing);
  EXPECT_EQ(importTorchScript(kCaseDir + "/linear_trace.pt.missing").error().kind, ErrorKind::kOther);
  ImportOptions o;
  o.input_types = {{DType::F32, {3, 4}}};
  auto model = importTorchScript(path, o);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->graph.outputs()[0].value->shape(), (Shape{3, 2}));
}

TEST(TorchScriptImportErrors, DataDependentControlFlowIsNamed) {
  REQUIRE_CASES();
  auto model = importCase("data_dependent_if_script");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("data-dependent"), std::string::npos) << model.error().message;
  EXPECT_NE(model.error().message.find("gen_ts_cases.py:"), std::string::npos) << model.error().message;
}

TEST(TorchScriptImportErrors, ShapeErrorsNameTheNode) {
  REQUIRE_CASES();
  ImportOptions o;
  o.input_types = {{DType::F32, {2, 3, 7}}};  // Linear(4, 5) needs a last dim of 4
  auto model = importCase("linear_trace", o);
  ASSERT_FALSE(model.ok());
  const std::string& msg = model.error().message;
  EXPECT_NE(msg.find("aten::linear at "), std::string::npos) << msg;
  EXPECT_NE(msg.find(": linear ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not match weight"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// ---- Zoo parity -----------------------------------------------------------------------------------

/// "NAME/FORMAT" for every zoo model and each of trace/script it supports.
std::vector<std::string> zooParams() {
  if (!fs::exists(kExporter)) return {"no_exporter"};
  if (!pythonHasTorch()) return {"no_torch"};
  const auto& entries = test::zooEntries();
  if (!entries) return {"exporter_failed"};
  std::vector<std::string> params;
  for (const test::ZooEntry& e : *entries)
    for (const char* f : {"trace", "script"})
      if (e.has(f)) params.push_back(e.name + "/" + f);
  return params.empty() ? std::vector<std::string>{"exporter_failed"} : params;
}

class TorchScriptImportZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchScriptImportZoo, MatchesPyTorch) {
  const std::string param = GetParam();
  if (param == "no_exporter") GTEST_SKIP() << kExporter << " does not exist yet";
  if (param == "no_torch") GTEST_SKIP() << kNoTorch;
  ASSERT_NE(param, "exporter_failed") << kExporter << " --list failed";
  const std::string name = param.substr(0, param.find('/')), format = param.substr(param.find('/') + 1);
  const test::ZooExport exported = test::zooExport(name, format);
  ASSERT_TRUE(exported.ok) << "export.py " << name << " (" << format << ") failed:\n" << exported.log;
  const std::string& prefix = exported.prefix;
  // Input types from the exported inputs (the archive's kiln_inputs.json is checked by the cases).
  auto inputs = readSafetensors(prefix + ".input.safetensors");
  ASSERT_TRUE(inputs.ok()) << inputs.error().message;
  ImportOptions o;
  for (size_t k = 0; inputs->tensors.count("input" + std::to_string(k)); ++k)
    o.input_types.push_back(inputs->tensors.at("input" + std::to_string(k)).type());
  auto model = importTorchScript(prefix + ".pt", o);
  ASSERT_TRUE(model.ok()) << model.error().message;
  double err = runAndCompare(*model, prefix + ".input.safetensors", prefix + ".expected.safetensors");
  RecordProperty("max_relative_error", std::to_string(err));
  std::cout << "[ parity   ] " << param << " nodes=" << model->graph.numNodes() << " max_rel_err=" << err << "\n";
}

INSTANTIATE_TEST_SUITE_P(Models, TorchScriptImportZoo, ::testing::ValuesIn(zooParams()), [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});

}  // namespace
}  // namespace kiln
