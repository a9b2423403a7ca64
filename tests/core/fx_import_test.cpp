// FX importer on small hand-written dumps (no libtorch): graph structure
// (inputs, roles, weights, aliases, constants, mutations, scope/provenance),
// argument normalization and dtype promotion, and every error path, each of
// which must be one line that starts with the file name and never crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/import/fx/fx_importer.h"
#include "core/safetensors.h"

namespace kiln {
namespace {

using nlohmann::json;

// ---- Building documents ----------------------------------------------------

json tensorVal(const char* dtype, std::vector<int64_t> shape) { return {{"dtype", dtype}, {"shape", shape}}; }
json nodeRef(const std::string& name) { return {{"node", name}}; }

json param(const std::string& name, const std::string& key, std::vector<int64_t> shape, const char* kind = "param",
           const char* dtype = "f32") {
  return {{"name", name}, {"kind", kind}, {"key", key}, {"dtype", dtype}, {"shape", shape}};
}
json input(const std::string& name, int index, std::vector<int64_t> shape, const char* dtype = "f32") {
  return {{"name", name}, {"kind", "input"}, {"key", "input" + std::to_string(index)}, {"index", index},
          {"dtype", dtype}, {"shape", shape}};
}
/// A list argument. Braces always make a list here: copy-initializing a
/// `json` from `{nodeRef("x")}` gives the one object itself under clang (its
/// copy constructor wins) but a one-element array under GCC.
struct Args {
  json list = json::array();
  Args() = default;
  Args(std::initializer_list<json> items) {
    for (const json& item : items) list.push_back(item);
  }
  Args(json j) : list(std::move(j)) {}  // NOLINT: a ready-made list (or a deliberately wrong type)
};
json node(const std::string& name, const std::string& target, Args args, json val, json kwargs = json::object(),
          const std::string& scope = "", const std::string& source = "model.py:1 (forward)") {
  return {{"name", name}, {"target", target}, {"args", args.list}, {"kwargs", kwargs},
          {"val", val},   {"scope", scope},   {"source", source}};
}

/// Schema argument: name, type, and optionally a default / kwarg_only.
json sa(const char* name, const char* type) { return {{"name", name}, {"type", type}}; }
json sa(const char* name, const char* type, json def, bool kwarg_only = false) {
  json a = {{"name", name}, {"type", type}, {"default", def}};
  if (kwarg_only) a["kwarg_only"] = true;
  return a;
}

/// Schemas of the overloads these tests use (as torch 1.13 writes them).
json opSchemas() {
  json none;
  return {
      {"aten.t.default", {{"args", {sa("self", "Tensor")}}}},
      {"aten.relu.default", {{"args", {sa("self", "Tensor")}}}},
      {"aten.neg.default", {{"args", {sa("self", "Tensor")}}}},
      {"aten.exp.default", {{"args", {sa("self", "Tensor")}}}},
      {"aten.lift_fresh_copy.default", {{"args", {sa("self", "Tensor")}}}},
      {"aten.addmm.default",
       {{"args",
         {sa("self", "Tensor"), sa("mat1", "Tensor"), sa("mat2", "Tensor"), sa("beta", "number", 1, true),
          sa("alpha", "number", 1, true)}}}},
      {"aten.mm.default", {{"args", {sa("self", "Tensor"), sa("mat2", "Tensor")}}}},
      {"aten.add.Tensor", {{"args", {sa("self", "Tensor"), sa("other", "Tensor"), sa("alpha", "number", 1, true)}}}},
      {"aten.mul.Tensor", {{"args", {sa("self", "Tensor"), sa("other", "Tensor")}}}},
      {"aten.div.Tensor", {{"args", {sa("self", "Tensor"), sa("other", "Tensor")}}}},
      {"aten.view.default", {{"args", {sa("self", "Tensor"), sa("size", "List[int]")}}}},
      {"aten.split.Tensor", {{"args", {sa("self", "Tensor"), sa("split_size", "int"), sa("dim", "int", 0)}}}},
      {"aten.masked_fill.Scalar", {{"args", {sa("self", "Tensor"), sa("mask", "Tensor"), sa("value", "number")}}}},
      {"aten.native_batch_norm.default",
       {{"args",
         {sa("input", "Tensor"), sa("weight", "Optional[Tensor]"), sa("bias", "Optional[Tensor]"),
          sa("running_mean", "Optional[Tensor]"), sa("running_var", "Optional[Tensor]"), sa("training", "bool"),
          sa("momentum", "float"), sa("eps", "float")}}}},
      {"aten.native_layer_norm.default",
       {{"args",
         {sa("input", "Tensor"), sa("normalized_shape", "List[int]"), sa("weight", "Optional[Tensor]"),
          sa("bias", "Optional[Tensor]"), sa("eps", "float")}}}},
      {"aten.max_pool2d_with_indices.default",
       {{"args",
         {sa("self", "Tensor"), sa("kernel_size", "List[int]"), sa("stride", "List[int]", json::array()),
          sa("padding", "List[int]", 0), sa("dilation", "List[int]", 1), sa("ceil_mode", "bool", false)}}}},
      {"aten.convolution.default",
       {{"args",
         {sa("input", "Tensor"), sa("weight", "Tensor"), sa("bias", "Optional[Tensor]"), sa("stride", "List[int]"),
          sa("padding", "List[int]"), sa("dilation", "List[int]"), sa("transposed", "bool"),
          sa("output_padding", "List[int]"), sa("groups", "int")}}}},
      {"aten.full.default",
       {{"args",
         {sa("size", "List[int]"), sa("fill_value", "number"), sa("dtype", "Optional[int]", none, true),
          sa("layout", "Optional[int]", none, true), sa("device", "Optional[Device]", none, true),
          sa("pin_memory", "Optional[bool]", none, true)}}}},
      {"aten.repeat_interleave.Tensor", {{"args", {sa("repeats", "Tensor"), sa("output_size", "Optional[int]", none, true)}}}},
      {"aten.bitwise_not.default", {{"args", {sa("self", "Tensor")}}}},
      {"aten.expand.default", {{"args", {sa("self", "Tensor"), sa("size", "List[int]"), sa("implicit", "bool", false, true)}}}},
      {"aten.foo.default", {{"args", {sa("self", "Tensor")}}}},
  };
}

/// nn.Sequential(nn.Linear(4, 3), nn.ReLU()) on f32[2, 4] (docs/fx-format.md's worked example).
json linearDoc() {
  return {
      {"format", "kiln-fx"},
      {"version", 1},
      {"mode", "eval"},
      {"weights_file", "linear_relu.safetensors"},
      {"placeholders", {param("arg0_1", "0.weight", {3, 4}), param("arg1_1", "0.bias", {3}), input("arg2_1", 0, {2, 4})}},
      {"constants", json::array()},
      {"aliases", json::object()},
      {"mutations", json::array()},
      {"nodes",
       {node("t", "aten.t.default", {nodeRef("arg0_1")}, tensorVal("f32", {4, 3}), json::object(), "0"),
        node("addmm", "aten.addmm.default", {nodeRef("arg1_1"), nodeRef("arg2_1"), nodeRef("t")}, tensorVal("f32", {2, 3}),
             json::object(), "0"),
        node("relu", "aten.relu.default", {nodeRef("addmm")}, tensorVal("f32", {2, 3}), json::object(), "1")}},
      {"outputs", {nodeRef("relu")}},
      {"ops", opSchemas()},
  };
}

TensorMap linearWeights() {
  return {{"0.weight", Tensor(DType::F32, {3, 4})}, {"0.bias", Tensor(DType::F32, {3})}};
}

Result<Model> importDoc(const json& doc, const TensorMap& weights = linearWeights(), const ImportOptions& o = {}) {
  return importFxJson(doc.dump(), weights, "test.fx.json", o);
}

/// A doc with the linear model's inputs and `nodes` / `outputs` replaced.
json withNodes(Args nodes, Args outputs) {
  json d = linearDoc();
  d["nodes"] = std::move(nodes.list);
  d["outputs"] = std::move(outputs.list);
  return d;
}

void expectError(const Result<Model>& r, const std::string& needle, const char* where = "test.fx.json: ") {
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << needle;
  const std::string& m = r.error().message;
  EXPECT_NE(m.find(needle), std::string::npos) << m;
  EXPECT_EQ(m.rfind(where, 0), 0u) << "error does not start with the file: " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "error is not one line: " << m;
}

const Node* findNode(const Graph& g, const std::string& op) {
  for (const auto& n : g.nodes())
    if (n->op() == op) return n.get();
  return nullptr;
}

// ---- Structure ---------------------------------------------------------------

TEST(FxImport, LinearReluBecomesLinearWithScopesAndWeights) {
  auto m = importDoc(linearDoc());
  ASSERT_TRUE(m.ok()) << m.error().message;
  const Graph& g = m->graph;
  ASSERT_EQ(g.inputs().size(), 3u);
  EXPECT_EQ(g.inputs()[0]->name(), "0.weight");
  EXPECT_EQ(g.inputs()[0]->role(), ValueRole::Param);
  EXPECT_EQ(g.inputs()[2]->name(), "input0");
  EXPECT_EQ(g.inputs()[2]->role(), ValueRole::Data);
  EXPECT_EQ(m->weights.size(), 2u);
  // addmm(b, x, t(W)) -> linear(x, W, b); the transpose is gone.
  ASSERT_EQ(g.numNodes(), 2u);
  const Node* lin = findNode(g, "linear");
  ASSERT_NE(lin, nullptr);
  EXPECT_EQ(lin->input(1), g.inputs()[0]);
  EXPECT_EQ(lin->scope(), "0");
  EXPECT_EQ(lin->provenance(), "model.py:1 (forward)");
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0].name, "output0");
  EXPECT_EQ(g.outputs()[0].value->type(), (TensorType{DType::F32, {2, 3}}));
  EXPECT_EQ(m->source, "test.fx.json");
}

TEST(FxImport, FileAndWeightsFileBesideIt) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_fx_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string json_path = (dir / "linear_relu.fx.json").string();
  std::ofstream(json_path) << linearDoc().dump();
  auto missing = importFx(json_path);
  expectError(missing, "weights file", json_path.c_str());
  ASSERT_TRUE(writeSafetensors((dir / "linear_relu.safetensors").string(), linearWeights()).ok());
  auto m = importFx(json_path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->graph.name, "linear_relu");
  std::ofstream(json_path) << "{\"format\": ";
  expectError(importFx(json_path), "malformed JSON", json_path.c_str());
  json no_weights = linearDoc();
  no_weights.erase("weights_file");
  std::ofstream(json_path) << no_weights.dump();
  expectError(importFx(json_path), "weights_file", json_path.c_str());
  std::filesystem::remove_all(dir);
  auto gone = importFx((dir / "nothing.fx.json").string());
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.error().message.find("nothing.fx.json"), std::string::npos);
}

TEST(FxImport, TiedParametersAreOneInputWithAliases) {
  json d = linearDoc();
  d["placeholders"][0]["aliases"] = {"head.weight"};
  d["aliases"] = {{"head.weight", "0.weight"}};
  auto m = importDoc(d);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->aliases.at("head.weight"), "0.weight");
  EXPECT_EQ(m->graph.findInput("head.weight"), nullptr);
  EXPECT_EQ(m->stateDict().count("head.weight"), 1u);
  d["aliases"] = {{"head.weight", "nothing"}};
  expectError(importDoc(d), "no parameter or buffer");
  d["aliases"] = {{"head.weight", "0.bias"}};
  expectError(importDoc(d), "tied to both");
  d["aliases"] = {{"0.bias", "0.weight"}};
  d["placeholders"][0].erase("aliases");
  expectError(importDoc(d), "also the name of a graph input");
}

TEST(FxImport, ConstantsBecomeConstInputs) {
  json d = linearDoc();
  d["constants"] = {{{"name", "_tensor_constant0"}, {"kind", "constant"}, {"key", "__constant__._tensor_constant0"},
                     {"dtype", "f32"}, {"shape", json::array()}}};
  d["nodes"].push_back(node("lift", "aten.lift_fresh_copy.default", {nodeRef("_tensor_constant0")}, tensorVal("f32", {})));
  d["nodes"].push_back(node("mul", "aten.mul.Tensor", {nodeRef("relu"), nodeRef("lift")}, tensorVal("f32", {2, 3})));
  d["outputs"] = json::array({nodeRef("mul")});
  TensorMap w = linearWeights();
  w["__constant__._tensor_constant0"] = Tensor::scalar(DType::F32, 3);
  auto m = importDoc(d, w);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const Value* c = m->graph.findInput("__const._tensor_constant0");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->role(), ValueRole::Const);
  EXPECT_EQ(m->weights.at("__const._tensor_constant0").at(0), 3.0);
  EXPECT_EQ(m->stateDict().count("__const._tensor_constant0"), 0u);
  expectError(importDoc(d), "constant '__constant__._tensor_constant0' is missing from the weights file");
}

/// BatchNorm in training: running stats (inplace) and num_batches_tracked (value) become BufferUpdate outputs.
json batchNormTrainDoc() {
  json d = linearDoc();
  d["mode"] = "train";
  d["placeholders"] = {param("w", "bn.weight", {3}),
                       param("b", "bn.bias", {3}),
                       param("rm", "bn.running_mean", {3}, "buffer"),
                       param("rv", "bn.running_var", {3}, "buffer"),
                       param("nbt", "bn.num_batches_tracked", {}, "buffer", "i64"),
                       input("x", 0, {4, 3, 2, 2})};
  json items = {{"items", {tensorVal("f32", {4, 3, 2, 2}), tensorVal("f32", {3}), tensorVal("f32", {3})}}};
  d["nodes"] = {node("add", "aten.add.Tensor", {nodeRef("nbt"), 1}, tensorVal("i64", {}), json::object(), "bn"),
                node("bn", "aten.native_batch_norm.default",
                     {nodeRef("x"), nodeRef("w"), nodeRef("b"), nodeRef("rm"), nodeRef("rv"), true, 0.1, 1e-5}, items, json::object(), "bn"),
                node("getitem", "operator.getitem", {nodeRef("bn"), 0}, tensorVal("f32", {4, 3, 2, 2}), json::object(), "bn")};
  d["outputs"] = json::array({nodeRef("getitem")});
  d["mutations"] = {
      {{"key", "bn.running_mean"}, {"placeholder", "rm"}, {"kind", "inplace"}, {"node", "bn"},
       {"op", "aten.native_batch_norm.default"}, {"arg", 3}},
      {{"key", "bn.running_var"}, {"placeholder", "rv"}, {"kind", "inplace"}, {"node", "bn"},
       {"op", "aten.native_batch_norm.default"}, {"arg", 4}},
      {{"key", "bn.num_batches_tracked"}, {"placeholder", "nbt"}, {"kind", "value"}, {"node", "add"}}};
  return d;
}

TensorMap batchNormWeights() {
  return {{"bn.weight", Tensor(DType::F32, {3})},
          {"bn.bias", Tensor(DType::F32, {3})},
          {"bn.running_mean", Tensor(DType::F32, {3})},
          {"bn.running_var", Tensor(DType::F32, {3})},
          {"bn.num_batches_tracked", Tensor(DType::I64, {})}};
}

TEST(FxImport, TrainBatchNormMutationsBecomeBufferUpdates) {
  ImportOptions train;
  train.training = true;
  auto m = importDoc(batchNormTrainDoc(), batchNormWeights(), train);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& outs = m->graph.outputs();
  ASSERT_EQ(outs.size(), 4u);
  EXPECT_EQ(outs[0].name, "output0");
  EXPECT_EQ(outs[1].name, "bn.running_mean");
  EXPECT_EQ(outs[1].role, OutputRole::BufferUpdate);
  const Node* bn = findNode(m->graph, "batch_norm");
  ASSERT_NE(bn, nullptr);
  EXPECT_EQ(bn->i("training"), 1);
  EXPECT_EQ(outs[1].value, bn->output(1));
  EXPECT_EQ(outs[2].value, bn->output(2));
  EXPECT_EQ(outs[3].name, "bn.num_batches_tracked");
  EXPECT_EQ(outs[3].value->type(), (TensorType{DType::I64, {}}));  // i64 + 1 stays i64
  EXPECT_EQ(m->graph.findInput("bn.running_var")->role(), ValueRole::Buffer);
}

TEST(FxImport, MutationErrors) {
  json d = batchNormTrainDoc();
  d["mutations"][2]["placeholder"] = "w";
  d["mutations"][2]["key"] = "bn.weight";
  expectError(importDoc(d, batchNormWeights()), "Kiln supports updates of buffers only");
  d = batchNormTrainDoc();
  d["mutations"][0]["placeholder"] = "nowhere";
  expectError(importDoc(d, batchNormWeights()), "'nowhere' is not a placeholder");
  d = batchNormTrainDoc();
  d["mutations"][1]["key"] = "bn.running_mean";
  expectError(importDoc(d, batchNormWeights()), "has key 'bn.running_var'");
  d = batchNormTrainDoc();
  d["mutations"][1] = d["mutations"][0];
  expectError(importDoc(d, batchNormWeights()), "listed twice");
  d = batchNormTrainDoc();
  d["mutations"][0]["arg"] = 4;
  expectError(importDoc(d, batchNormWeights()), "is not 'rm'");
  d = batchNormTrainDoc();
  d["mutations"][0]["arg"] = 99;
  expectError(importDoc(d, batchNormWeights()), "out of range");
  d = batchNormTrainDoc();
  d["nodes"][1]["args"][5] = false;  // eval-mode batch norm updates nothing
  expectError(importDoc(d, batchNormWeights()), "does not update 'running_mean'");
  d = batchNormTrainDoc();
  d["mutations"][2]["node"] = "ghost";
  expectError(importDoc(d, batchNormWeights()), "'ghost', which is not defined");
  d = batchNormTrainDoc();
  d["mutations"][0]["op"] = "aten.other.default";
  expectError(importDoc(d, batchNormWeights()), "not 'aten.other.default'");
}

TEST(FxImport, SavedStatisticsAreRefusedOnlyWhenUsed) {
  json d = batchNormTrainDoc();
  d["nodes"].push_back(node("getitem_1", "operator.getitem", {nodeRef("bn"), 1}, tensorVal("f32", {3})));
  ASSERT_TRUE(importDoc(d, batchNormWeights()).ok());  // an unused getitem is harmless
  d["nodes"].push_back(node("neg", "aten.neg.default", {nodeRef("getitem_1")}, tensorVal("f32", {3})));
  expectError(importDoc(d, batchNormWeights()), "saved batch statistics");
  d["nodes"].erase(d["nodes"].end() - 1);
  d["outputs"].push_back(nodeRef("getitem_1"));
  expectError(importDoc(d, batchNormWeights()), "output 1 'getitem_1' cannot be used");
}

TEST(FxImport, EvalDumpTrainsUnlessItsBatchNormUsesRunningStatistics) {
  ImportOptions train;
  train.training = true;
  auto linear = importDoc(linearDoc(), linearWeights(), train);  // no mode-dependent op: trains as traced
  ASSERT_TRUE(linear.ok()) << linear.error().message;
  json bn = batchNormTrainDoc();
  bn["mode"] = "eval";
  bn["mutations"] = json::array();
  bn["nodes"].erase(bn["nodes"].begin());  // no num_batches_tracked update
  bn["nodes"][0]["args"][5] = false;
  expectError(importDoc(bn, batchNormWeights(), train), "uses its running statistics");
  ASSERT_TRUE(importDoc(bn, batchNormWeights()).ok());  // for inference it imports
}

TEST(FxImport, SymbolicSizesAreNumbersKnownAtImport) {
  // Python's floor division and modulo round toward -inf: -7 // 2 = -4, -7 % 2 = 1.
  json sym = {{"scalar", "int"}};
  json d = withNodes({node("q", "operator.floordiv", {-7, 2}, sym), node("r", "_operator.mod", {-7, 2}, sym),
                      node("rows", "operator.add", {nodeRef("q"), 6}, sym),
                      node("cols", "operator.mul", {nodeRef("r"), 4}, sym),
                      node("v", "aten.view.default", {nodeRef("arg2_1"), {nodeRef("rows"), nodeRef("cols")}},
                           tensorVal("f32", {2, 4}))},
                     {nodeRef("v")});
  auto m = importDoc(d);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->graph.outputs()[0].value->shape(), (Shape{2, 4}));
  // A number where a tensor is needed, and arithmetic on a tensor, fail clearly.
  d["outputs"] = json::array({nodeRef("rows")});
  expectError(importDoc(d), "is a number (a size), not a tensor");
  d = withNodes({node("bad", "operator.mul", {nodeRef("arg2_1"), 2}, sym)}, {nodeRef("arg2_1")});
  expectError(importDoc(d), "works on sizes only");
}

TEST(FxImport, InputTypesMustMatchTheDump) {
  ImportOptions o;
  o.input_types = {{DType::F32, {2, 4}}};
  EXPECT_TRUE(importDoc(linearDoc(), linearWeights(), o).ok());
  o.input_types = {{DType::F32, {8, 4}}};
  expectError(importDoc(linearDoc(), linearWeights(), o), "specialized to their example shapes");
  o.input_types = {{DType::F32, {2, 4}}, {DType::F32, {2, 4}}};
  expectError(importDoc(linearDoc(), linearWeights(), o), "2 input types were given");
}

TEST(FxImport, DefaultsAndKwargsAreNormalized) {
  json d = linearDoc();
  d["placeholders"] = json::array({input("x", 0, {1, 2, 8, 8})});
  json items = {{"items", {tensorVal("f32", {1, 2, 4, 4}), tensorVal("i64", {1, 2, 4, 4})}}};
  // stride=[] (= kernel), padding=0, dilation=1 come from the schema defaults.
  d["nodes"] = {node("mp", "aten.max_pool2d_with_indices.default", {nodeRef("x"), {2, 2}}, items),
                node("gi", "operator.getitem", {nodeRef("mp"), 0}, tensorVal("f32", {1, 2, 4, 4}))};
  d["outputs"] = json::array({nodeRef("gi")});
  auto m = importDoc(d, {});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const Node* mp = findNode(m->graph, "max_pool2d");
  ASSERT_NE(mp, nullptr);
  EXPECT_EQ(mp->is("kernel_size"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(mp->is("padding"), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(mp->is("dilation"), (std::vector<int64_t>{1, 1}));
  // The same through kwargs.
  d["nodes"][0]["args"] = json::array({nodeRef("x")});
  d["nodes"][0]["kwargs"] = {{"kernel_size", {2, 2}}, {"ceil_mode", true}};
  m = importDoc(d, {});
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(findNode(m->graph, "max_pool2d")->i("ceil_mode"), 1);
  // The indices are refused when used.
  d["nodes"].push_back(node("gi1", "operator.getitem", {nodeRef("mp"), 1}, tensorVal("i64", {1, 2, 4, 4})));
  d["outputs"] = json::array({nodeRef("gi1")});
  expectError(importDoc(d, {}), "indices result of max pooling is not supported");
}

TEST(FxImport, NumbersFollowPyTorchPromotion) {
  json d = linearDoc();
  d["placeholders"] = {input("i", 0, {3}, "i64"), input("f", 1, {3})};
  d["nodes"] = {node("a", "aten.add.Tensor", {nodeRef("i"), 1}, tensorVal("i64", {3})),      // int + int -> i64
                node("b", "aten.mul.Tensor", {nodeRef("i"), 0.5}, tensorVal("f32", {3})),    // int * float -> f32
                node("c", "aten.mul.Tensor", {nodeRef("f"), 2}, tensorVal("f32", {3})),      // float * int -> f32
                node("e", "aten.div.Tensor", {nodeRef("i"), nodeRef("a")}, tensorVal("f32", {3})),  // true division
                node("g", "aten.add.Tensor", {nodeRef("f"), nodeRef("i")}, tensorVal("f32", {3}), {{"alpha", 2}}),
                node("h", "aten.exp.default", {nodeRef("i")}, tensorVal("f32", {3}))};
  d["outputs"] = {nodeRef("a"), nodeRef("b"), nodeRef("c"), nodeRef("e"), nodeRef("g"), nodeRef("h")};
  auto m = importDoc(d, {});
  ASSERT_TRUE(m.ok()) << m.error().message;
  // A number becomes a 0-d `full` of the result dtype.
  bool saw_half = false;
  for (const auto& n : m->graph.nodes())
    if (n->op() == "full" && n->f("value") == 0.5) saw_half = n->dt("dtype") == DType::F32;
  EXPECT_TRUE(saw_half);
  d["nodes"][1]["val"] = tensorVal("i64", {3});  // a lying val is caught
  expectError(importDoc(d, {}), "Kiln computes f32[3] but the dump records i64[3]");
}

TEST(FxImport, ConvOneDRunsAsConv2d) {
  json d = linearDoc();
  d["placeholders"] = {param("w", "conv.weight", {4, 2, 3}), input("x", 0, {1, 2, 10})};
  d["nodes"] = json::array({node("conv", "aten.convolution.default",
                                {nodeRef("x"), nodeRef("w"), nullptr, {2}, {1}, {1}, false, {0}, 1},
                                tensorVal("f32", {1, 4, 5}))});
  d["outputs"] = json::array({nodeRef("conv")});
  auto m = importDoc(d, {{"conv.weight", Tensor(DType::F32, {4, 2, 3})}});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const Node* conv = findNode(m->graph, "conv2d");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->is("stride"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(conv->is("padding"), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(conv->input(0)->shape(), (Shape{1, 2, 1, 10}));
}

TEST(FxImport, TransposedConvolutionIsConv2dInputBackward) {
  // ConvTranspose1d(4, 2, 3, stride=2, padding=1, output_padding=1): (10 - 1) * 2 - 2 + 2 + 1 + 1 = 20.
  json d = linearDoc();
  d["placeholders"] = {param("w", "conv.weight", {4, 2, 3}), input("x", 0, {1, 4, 10})};
  d["nodes"] = json::array({node("conv", "aten.convolution.default",
                                {nodeRef("x"), nodeRef("w"), nullptr, {2}, {1}, {1}, true, {1}, 1},
                                tensorVal("f32", {1, 2, 20}))});
  d["outputs"] = json::array({nodeRef("conv")});
  const TensorMap w = {{"conv.weight", Tensor(DType::F32, {4, 2, 3})}};
  auto m = importDoc(d, w);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const Node* conv = findNode(m->graph, "conv2d_input_backward");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->is("input_shape"), (std::vector<int64_t>{1, 2, 1, 20}));
  EXPECT_EQ(conv->is("stride"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(m->graph.outputs()[0].value->shape(), (Shape{1, 2, 20}));
  d["nodes"][0]["args"][7] = {2};  // not smaller than the stride
  expectError(importDoc(d, w), "output_padding must be smaller than either stride or dilation");
}

TEST(FxImport, SplitAndGetitem) {
  json d = linearDoc();
  d["placeholders"] = json::array({input("x", 0, {5, 2})});
  json items = {{"items", {tensorVal("f32", {2, 2}), tensorVal("f32", {2, 2}), tensorVal("f32", {1, 2})}}};
  d["nodes"] = {node("s", "aten.split.Tensor", {nodeRef("x"), 2}, items),
                node("g", "operator.getitem", {nodeRef("s"), -1}, tensorVal("f32", {1, 2}))};
  d["outputs"] = json::array({nodeRef("g")});
  auto m = importDoc(d, {});
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(findNode(m->graph, "split")->is("sizes"), (std::vector<int64_t>{2, 2, 1}));
  d["nodes"][1]["args"][1] = 3;
  expectError(importDoc(d, {}), "index 3 is out of range for 3 elements");
  d["nodes"][1]["args"] = json::array({nodeRef("x"), 0});
  expectError(importDoc(d, {}), "'x' is not a tuple or list");
  d["nodes"][1]["args"] = json::array({nodeRef("s")});
  expectError(importDoc(d, {}), "operator.getitem expects args");
  d["nodes"][1]["args"] = json::array({nodeRef("s"), 2});
  d["outputs"] = json::array({nodeRef("s")});
  expectError(importDoc(d, {}), "output 0 's' is a tuple, not a tensor");
}

TEST(FxImport, LayerNormStatisticsRefusedWhenUsed) {
  json d = linearDoc();
  d["placeholders"] = json::array({input("x", 0, {2, 4})});
  json items = {{"items", {tensorVal("f32", {2, 4}), tensorVal("f32", {2, 1}), tensorVal("f32", {2, 1})}}};
  d["nodes"] = {node("ln", "aten.native_layer_norm.default", {nodeRef("x"), {4}, nullptr, nullptr, 1e-5}, items),
                node("g0", "operator.getitem", {nodeRef("ln"), 0}, tensorVal("f32", {2, 4})),
                node("g2", "operator.getitem", {nodeRef("ln"), 2}, tensorVal("f32", {2, 1})),
                node("n", "aten.neg.default", {nodeRef("g2")}, tensorVal("f32", {2, 1}))};
  d["outputs"] = json::array({nodeRef("g0")});
  expectError(importDoc(d, {}), "does not return mean and rstd");
  d["nodes"].erase(d["nodes"].end() - 1);
  auto m = importDoc(d, {});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const Node* ln = findNode(m->graph, "layer_norm");
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->input(1)->producer()->op(), "full");  // weight None -> ones
}

TEST(FxImport, SpecialFloatsAndMaskedFill) {
  json d = linearDoc();
  d["placeholders"] = {input("x", 0, {2, 2}), input("m", 1, {2, 2}, "bool")};
  d["nodes"] = json::array({node("mf", "aten.masked_fill.Scalar", {nodeRef("x"), nodeRef("m"), {{"float", "-inf"}}}, tensorVal("f32", {2, 2}))});
  d["outputs"] = json::array({nodeRef("mf")});
  auto m = importDoc(d, {});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const Node* full = findNode(m->graph, "full");
  ASSERT_NE(full, nullptr);
  EXPECT_TRUE(std::isinf(full->f("value")) && full->f("value") < 0);
  d["nodes"][0]["args"][2] = {{"float", "infinity"}};
  expectError(importDoc(d, {}), "expected \"inf\", \"-inf\" or \"nan\"");
}

TEST(FxImport, FullDtypeFollowsTheFillValue) {
  json d = linearDoc();
  d["placeholders"] = json::array();
  d["nodes"] = {node("a", "aten.full.default", {{2}, 7}, tensorVal("i64", {2})),
                node("b", "aten.full.default", {{2}, 7.0}, tensorVal("f32", {2})),
                node("c", "aten.full.default", {{2}, true}, tensorVal("bool", {2})),
                node("d", "aten.full.default", {{2}, 7}, tensorVal("f64", {2}), {{"dtype", {{"dtype", "f64"}}}})};
  d["outputs"] = {nodeRef("a"), nodeRef("b"), nodeRef("c"), nodeRef("d")};
  auto m = importDoc(d, {});
  ASSERT_TRUE(m.ok()) << m.error().message;
}

TEST(FxImport, SupportedOpsCoverTheZooCensus) {
  // Every overload in docs/fx-format.md's census of the zoo (torch 1.13, eval and train; 37 models).
  const char* census[] = {
      "aten._adaptive_avg_pool2d.default", "aten._embedding_bag.default",
      "aten._native_multi_head_attention.default", "aten._reshape_alias.default", "aten._softmax.default",
      "aten._to_copy.default", "aten._unsafe_view.default", "aten.add.Tensor", "aten.addmm.default",
      "aten.arange.default", "aten.arange.start", "aten.arange.start_step", "aten.as_strided.default",
      "aten.avg_pool2d.default", "aten.avg_pool3d.default", "aten.baddbmm.default", "aten.bernoulli_.float",
      "aten.bmm.default", "aten.cat.default", "aten.clone.default", "aten.constant_pad_nd.default",
      "aten.convolution.default", "aten.cos.default", "aten.div.Scalar", "aten.div.Tensor", "aten.embedding.default",
      "aten.empty.memory_format", "aten.empty_like.default", "aten.eq.Scalar", "aten.eq.Tensor",
      "aten.expand.default", "aten.fill.Scalar", "aten.fill.Tensor", "aten.full.default", "aten.gelu.default",
      "aten.hardsigmoid.default", "aten.hardswish.default", "aten.hardtanh.default", "aten.index.Tensor",
      "aten.index_put.default", "aten.index_select.default", "aten.lift_fresh_copy.default",
      "aten.masked_fill.Scalar", "aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default",
      "aten.mean.dim", "aten.mm.default", "aten.mul.Tensor", "aten.native_batch_norm.default",
      "aten.native_group_norm.default", "aten.native_layer_norm.default", "aten.ne.Scalar", "aten.neg.default",
      "aten.new_zeros.default", "aten.ones.default", "aten.permute.default", "aten.pow.Tensor_Scalar",
      "aten.pow.Tensor_Tensor", "aten.reciprocal.default", "aten.relu.default", "aten.repeat_interleave.Tensor",
      "aten.roll.default", "aten.rsqrt.default", "aten.scatter_add.default", "aten.scatter_reduce.two",
      "aten.select.int", "aten.sigmoid.default", "aten.softplus.default", "aten.silu.default", "aten.sin.default", "aten.slice.Tensor",
      "aten.slice_scatter.default", "aten.split.Tensor", "aten.split_with_sizes.default", "aten.squeeze.dim",
      "aten.stack.default", "aten.sub.Tensor", "aten.sum.dim_IntList", "aten.t.default", "aten.tanh.default",
      "aten.topk.default", "aten.transpose.int", "aten.triu.default", "aten.unbind.int", "aten.unsafe_split.Tensor",
      "aten.unsqueeze.default", "aten.upsample_bilinear2d.vec", "aten.upsample_nearest2d.vec", "aten.view.default", "aten.zeros.default",
      "aten.zeros_like.default", "operator.getitem"};
  auto ops = fxSupportedOps();
  std::set<std::string> supported(ops.begin(), ops.end());
  EXPECT_EQ(supported.size(), ops.size()) << "an overload appears in two rule tables";
  for (const char* op : census) EXPECT_TRUE(supported.count(op)) << op;
  EXPECT_GE(ops.size(), 150u);
}

TEST(FxImport, FuzzSeedCorpusImports) {
  // The weights tests/fuzz/fuzz_fx_json.cpp gives every input.
  TensorMap w = linearWeights();
  for (const char* k : {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}) w[k] = Tensor(DType::F32, {3});
  w["bn.num_batches_tracked"] = Tensor(DType::I64, {});
  w["__constant__._tensor_constant0"] = Tensor::scalar(DType::F32, 2);
  auto dir = std::filesystem::path(KILN_TESTS_DIR) / "fuzz" / "corpus" / "fx_json";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto m = importFxJson(text, w, entry.path().filename().string());
    bool invalid = entry.path().filename().string().rfind("invalid_", 0) == 0;
    EXPECT_EQ(m.ok(), !invalid) << entry.path() << ": " << (m.ok() ? "imported" : m.error().message);
    ++seeds;
  }
  EXPECT_GE(seeds, 4);
}

// ---- Errors ------------------------------------------------------------------

TEST(FxImportErrors, MalformedJson) {
  expectError(importFxJson("{\"format\": \"kiln-fx\",", {}, "test.fx.json"), "malformed JSON");
  expectError(importFxJson("", {}, "test.fx.json"), "malformed JSON");
  expectError(importFxJson("[1, 2]", {}, "test.fx.json"), "expected a JSON object at the top level");
  expectError(importFxJson(std::string(100, '[') + std::string(100, ']'), {}, "test.fx.json"), "nests deeper");
}

TEST(FxImportErrors, FormatVersionMode) {
  json d = linearDoc();
  d["format"] = "onnx";
  expectError(importDoc(d), "not a Kiln FX dump");
  d = linearDoc();
  d["version"] = 2;
  expectError(importDoc(d), "version 2 is not supported");
  d = linearDoc();
  d["version"] = "1";
  expectError(importDoc(d), "version: expected an integer, got string");
  d = linearDoc();
  d["mode"] = "infer";
  expectError(importDoc(d), "mode: expected \"train\" or \"eval\"");
}

TEST(FxImportErrors, MissingFields) {
  for (const char* field : {"format", "version", "mode", "placeholders", "nodes", "outputs", "ops"}) {
    json d = linearDoc();
    d.erase(field);
    expectError(importDoc(d), std::string("missing field '") + field + "'");
  }
  for (const char* field : {"name", "target", "args", "val"}) {
    json d = linearDoc();
    d["nodes"][1].erase(field);
    expectError(importDoc(d), std::string("nodes[1]: missing field '") + field + "'");
  }
  for (const char* field : {"name", "kind", "key", "dtype", "shape"}) {
    json d = linearDoc();
    d["placeholders"][0].erase(field);
    expectError(importDoc(d), std::string("placeholders[0]: missing field '") + field + "'");
  }
  json d = linearDoc();
  d["placeholders"][2].erase("index");
  expectError(importDoc(d), "placeholders[2]: missing field 'index'");
}

TEST(FxImportErrors, WrongJsonTypes) {
  json d = linearDoc();
  d["nodes"][1]["args"] = "self";
  expectError(importDoc(d), "nodes[1].args: expected an array, got string");
  d = linearDoc();
  d["placeholders"][0]["shape"] = {3, "4"};
  expectError(importDoc(d), "placeholders[0].shape[1]: expected an integer, got string");
  d = linearDoc();
  d["placeholders"][0]["shape"] = {3, -4};
  expectError(importDoc(d), "negative dimension");
  d = linearDoc();
  d["placeholders"][0]["shape"] = {1 << 30, 1 << 30};
  expectError(importDoc(d), "more than 2^40 elements");
  d = linearDoc();
  d["placeholders"][0]["dtype"] = "complex64";
  expectError(importDoc(d), "unsupported dtype 'complex64'");
  d = linearDoc();
  d["placeholders"][0]["kind"] = "weight";
  expectError(importDoc(d), "expected \"param\", \"buffer\" or \"input\"");
  d = linearDoc();
  d["nodes"][0]["val"] = 5;
  expectError(importDoc(d), "nodes[0].val: expected an object, got number");
  d = linearDoc();
  d["nodes"][0]["kwargs"] = json::array();
  expectError(importDoc(d), "kwargs: expected an object, got array");
  d = linearDoc();
  d["ops"]["aten.t.default"]["args"][0]["kwarg_only"] = "yes";
  expectError(importDoc(d), "kwarg_only: expected a boolean, got string");
  d = linearDoc();
  d["nodes"][1]["args"][0] = {{"tensor", "x"}};
  expectError(importDoc(d), "unknown encoded argument kind 'tensor'");
  d = linearDoc();
  d["nodes"][1]["args"][0] = {{"node", "arg1_1"}, {"extra", 1}};
  expectError(importDoc(d), "exactly one key");
  d = linearDoc();
  d["nodes"][1]["args"][0] = 18446744073709551615ull;
  expectError(importDoc(d), "integer out of range");
  d = linearDoc();
  d["aliases"] = {{"a", 1}};
  expectError(importDoc(d), "aliases.a: expected a string, got number");
}

TEST(FxImportErrors, NamesAndReferences) {
  json d = linearDoc();
  d["nodes"][1]["name"] = "t";
  expectError(importDoc(d), "name 't' is defined twice");
  d = linearDoc();
  d["nodes"][0]["name"] = "";
  expectError(importDoc(d), "empty name");
  d = linearDoc();
  d["nodes"][1]["args"][2] = nodeRef("relu");  // used before it is defined
  expectError(importDoc(d), "'relu', which is not defined before this point");
  d = linearDoc();
  d["outputs"] = json::array({nodeRef("nothing")});
  expectError(importDoc(d), "'nothing', which is not defined");
  d = linearDoc();
  d["outputs"] = json::array({3});
  expectError(importDoc(d), "output 0 must be a tensor reference, got int");
  d = linearDoc();
  d["placeholders"][2]["index"] = 1;
  expectError(importDoc(d), "is input 1, expected input 0");
  d = linearDoc();
  d["placeholders"][1]["key"] = "0.weight";
  expectError(importDoc(d), "graph input '0.weight' is defined twice");
}

TEST(FxImportErrors, UnsupportedOpNamesOpSourceAndScope) {
  json d = linearDoc();
  d["nodes"][2] = node("foo", "aten.foo.default", {nodeRef("addmm")}, tensorVal("f32", {2, 3}), json::object(), "blocks.0",
                       "model.py:12 (forward)");
  auto r = importDoc(d);
  expectError(r, "test.fx.json: unsupported op aten.foo.default at model.py:12 (forward) (scope blocks.0)");
  EXPECT_NE(r.error().message.find("aten overloads"), std::string::npos);
  d["nodes"][2]["target"] = "aten.add.Scalarish";
  expectError(importDoc(d), "supported overloads of aten.add: aten.add.Scalar, aten.add.Tensor");
}

TEST(FxImportErrors, SchemaProblems) {
  json d = linearDoc();
  d["ops"].erase("aten.relu.default");
  expectError(importDoc(d), "no schema for it");
  d = linearDoc();
  d["nodes"][2]["args"].push_back(1);
  expectError(importDoc(d), "too many positional arguments");
  d = linearDoc();
  d["nodes"][2]["kwargs"] = {{"inplace", true}};
  expectError(importDoc(d), "unknown keyword argument 'inplace'");
  d = linearDoc();
  d["nodes"][2]["args"] = json::array();
  expectError(importDoc(d), "missing argument 'self'");
  d = linearDoc();
  d["nodes"][1]["kwargs"] = {{"self", nodeRef("arg1_1")}};
  expectError(importDoc(d), "argument 'self' given twice");
  d = linearDoc();
  d["nodes"][1]["kwargs"] = {{"beta", "one"}};
  expectError(importDoc(d), "argument 'beta': expected a number, got string");
  d = linearDoc();
  d["ops"]["aten.relu.default"]["args"][0]["name"] = "input";
  expectError(importDoc(d), "no argument 'self'");
  d = linearDoc();
  d["ops"]["aten.t.default"]["args"].push_back(d["ops"]["aten.t.default"]["args"][0]);
  expectError(importDoc(d), "appears twice");
}

TEST(FxImportErrors, ArgumentValues) {
  json d = linearDoc();
  d["nodes"][2]["args"][0] = 3;
  expectError(importDoc(d), "argument 'self': expected a tensor, got int");
  d = withNodes({node("v", "aten.view.default", {nodeRef("arg2_1"), {3, -1}}, tensorVal("f32", {3, 3}))}, {nodeRef("v")});
  expectError(importDoc(d), "cannot reshape f32[2,4] to [3,-1]");
  d = withNodes({node("v", "aten.view.default", {nodeRef("arg2_1"), {-1, -1}}, tensorVal("f32", {8}))}, {nodeRef("v")});
  expectError(importDoc(d), "more than one -1");
  d = withNodes({node("v", "aten.view.default", {nodeRef("arg2_1"), {1 << 30, 1 << 30, 0}}, tensorVal("f32", {8}))},
                {nodeRef("v")});
  expectError(importDoc(d), "more than 2^40 elements");
  d = withNodes({node("v", "aten.view.default", {nodeRef("arg2_1"), {9007199254740993, 1}}, tensorVal("f32", {8}))},
                {nodeRef("v")});
  expectError(importDoc(d), "out of range");
  d = withNodes({node("s", "aten.split.Tensor", {nodeRef("arg2_1"), 0}, tensorVal("f32", {8}))}, {nodeRef("s")});
  expectError(importDoc(d), "argument 'split_size': must be positive");
  d = withNodes({node("s", "aten.split.Tensor", {nodeRef("arg2_1"), 1, 5}, tensorVal("f32", {8}))}, {nodeRef("s")});
  expectError(importDoc(d), "dim 5 is out of range for a tensor of rank 2");
}

TEST(FxImportErrors, RepeatInterleaveNeedsOneCountKnownAtImport) {
  // make_fx's grouped-query attention: full([1], 2) expanded to the heads.
  json d = withNodes({node("f", "aten.full.default", {{1}, 2}, tensorVal("i64", {1})),
                      node("e", "aten.expand.default", {nodeRef("f"), {3}}, tensorVal("i64", {3})),
                      node("r", "aten.repeat_interleave.Tensor", {nodeRef("e")}, tensorVal("i64", {6}))},
                     {nodeRef("r")});
  auto m = importDoc(d);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_NE(findNode(m->graph, "arange"), nullptr);
  // Counts read from an input: a data-dependent shape.
  d["placeholders"].push_back(input("counts", 1, {3}, "i64"));
  d["nodes"] = json::array({node("r", "aten.repeat_interleave.Tensor", {nodeRef("counts")}, tensorVal("i64", {6}))});
  expectError(importDoc(d), "argument 'repeats': per-element repeats computed in the graph");
}

TEST(FxImportErrors, BitwiseOpsOnIntegersAreRefused) {
  json d = linearDoc();
  d["placeholders"] = {input("m", 0, {2}, "bool"), input("i", 1, {2}, "i64")};
  d["nodes"] = json::array({node("n", "aten.bitwise_not.default", {nodeRef("m")}, tensorVal("bool", {2}))});
  d["outputs"] = json::array({nodeRef("n")});
  auto m = importDoc(d, {});
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_NE(findNode(m->graph, "logical_not"), nullptr);
  d["nodes"][0]["args"][0] = nodeRef("i");
  d["nodes"][0]["val"] = tensorVal("i64", {2});
  expectError(importDoc(d, {}), "bitwise ops on i64[2] are not supported");
}

TEST(FxImportErrors, WindowArgumentsMustBePositive) {
  // Regression (found in review during fuzzing): a zero stride would reach pooledLength and divide by zero.
  json d = linearDoc();
  d["placeholders"] = {input("x", 0, {1, 2, 8, 8}), input("w", 1, {4, 2, 3, 3})};
  d["nodes"] = json::array({node("c", "aten.convolution.default",
                                {nodeRef("x"), nodeRef("w"), nullptr, {0, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1},
                                tensorVal("f32", {1, 4, 8, 8}))});
  d["outputs"] = json::array({nodeRef("c")});
  expectError(importDoc(d, {}), "argument 'stride': values must be at least 1, got [0,1]");
  d["nodes"][0]["args"][3] = {1, 1};
  d["nodes"][0]["args"][4] = {-1, 1};
  expectError(importDoc(d, {}), "argument 'padding': values must be at least 0");
  json items = {{"items", {tensorVal("f32", {1, 2, 4, 4}), tensorVal("i64", {1, 2, 4, 4})}}};
  d["nodes"] = {node("mp", "aten.max_pool2d_with_indices.default", {nodeRef("x"), {2, 2}, {0, 0}}, items),
                node("g", "operator.getitem", {nodeRef("mp"), 0}, tensorVal("f32", {1, 2, 4, 4}))};
  d["outputs"] = json::array({nodeRef("g")});
  expectError(importDoc(d, {}), "argument 'stride': values must be at least 1");
}

TEST(FxImportErrors, SplitIntoTooManyPieces) {
  json d = linearDoc();
  d["placeholders"] = json::array({input("x", 0, {1 << 20})});
  d["nodes"] = json::array({node("s", "aten.split.Tensor", {nodeRef("x"), 1}, tensorVal("f32", {1}))});
  d["outputs"] = json::array({nodeRef("x")});
  expectError(importDoc(d, {}), "more than 65536 pieces");
}

TEST(FxImportErrors, ShapeErrorsFromKilnOpsNameTheNode) {
  json d = withNodes({node("mm", "aten.mm.default", {nodeRef("arg2_1"), nodeRef("arg2_1")}, tensorVal("f32", {2, 4}),
                           json::object(), "fc", "model.py:7 (forward)")},
                     {nodeRef("mm")});
  expectError(importDoc(d), "node 'mm' (aten.mm.default at model.py:7 (forward) (scope fc)): matmul @fc");
}

TEST(FxImportErrors, ValMismatchAndOddVals) {
  json d = linearDoc();
  d["nodes"][0]["val"] = tensorVal("f32", {3, 4});
  expectError(importDoc(d), "node 't' (aten.t.default");
  expectError(importDoc(d), "Kiln computes f32[4,3] but the dump records f32[3,4]");
  d = linearDoc();
  d["nodes"][0]["val"] = {{"scalar", "int"}};
  expectError(importDoc(d), "the dump records a Python int, but Kiln lowered it to a tensor");
  d = linearDoc();
  d["nodes"][0]["val"] = tensorVal("complex64", {4, 3});
  expectError(importDoc(d), "dtype 'complex64' is not supported by Kiln");
  d = linearDoc();
  d["nodes"][0]["val"] = {{"items", {tensorVal("f32", {4, 3})}}};
  expectError(importDoc(d), "Kiln produced one tensor");
  d = linearDoc();
  d["nodes"][0]["val"] = {{"neither", 1}};
  expectError(importDoc(d), "expected a value description");
}

TEST(FxImportErrors, WeightsMissingOrLying) {
  TensorMap w = linearWeights();
  w.erase("0.bias");
  expectError(importDoc(linearDoc(), w), "parameter '0.bias' is missing from the weights file");
  w = linearWeights();
  w["0.bias"] = Tensor(DType::F64, {3});
  expectError(importDoc(linearDoc(), w), "parameter '0.bias': the weights file holds f64[3], the graph declares f32[3]");
  w = linearWeights();
  w["0.weight"] = Tensor(DType::F32, {4, 3});
  expectError(importDoc(linearDoc(), w), "holds f32[4,3], the graph declares f32[3,4]");
}

TEST(FxImportErrors, HostileNamesStayOnOneLine) {
  json d = linearDoc();
  d["nodes"][2] = node("x\ny", "aten.foo\n.default", {nodeRef("addmm")}, tensorVal("f32", {2, 3}), json::object(),
                       "scope\r\n", "file\n:1");
  auto r = importDoc(d);
  expectError(r, "unsupported op aten.foo\\x0a.default");
  d = linearDoc();
  d["nodes"][1]["args"][0] = nodeRef(std::string(10000, 'a'));
  r = importDoc(d);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.error().message.size(), 1000u) << "long names are cut in messages";
}

}  // namespace
}  // namespace kiln
