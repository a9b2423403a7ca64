// importTorchScript: load the archive, find the data input types, turn the
// module's parameters and buffers into graph inputs named by their state_dict
// keys (tied parameters become one input plus aliases), walk `forward`, and
// collect the outputs: the forward's tensors (flattened) and then a
// BufferUpdate per buffer the forward wrote (BatchNorm running statistics in
// training mode, num_batches_tracked). Finally the graph is rebuilt with its
// inputs in a stable order (data, state_dict order, constants) and without
// dead nodes.
#include "core/import/torchscript/torchscript_importer.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/import/torchscript/ts_walker.h"

namespace kiln {

namespace {

using ts::SV;

constexpr const char* kInputsFile = "kiln_inputs.json";

/// One state_dict entry of the loaded module.
struct StateEntry {
  std::string key;
  at::Tensor tensor;
  ValueRole role;
};

/// Parameters, then buffers, then children: the order of Module.state_dict().
void collectState(const torch::jit::Module& m, const std::string& prefix, std::vector<StateEntry>& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false))
    out.push_back({prefix + p.name, p.value, ValueRole::Param});
  for (const auto& b : m.named_buffers(/*recurse=*/false)) out.push_back({prefix + b.name, b.value, ValueRole::Buffer});
  for (const auto& c : m.named_children()) collectState(c.value, prefix + c.name + ".", out);
}

std::optional<DType> parseDTypeName(const std::string& s) {
  if (auto d = parseDType(s)) return d;
  if (auto d = parseSafetensorsDType(s)) return d;
  static const std::map<std::string, DType> torch_names = {
      {"float32", DType::F32}, {"float", DType::F32}, {"float64", DType::F64},   {"double", DType::F64},
      {"float16", DType::F16}, {"half", DType::F16},  {"bfloat16", DType::BF16}, {"int64", DType::I64},
      {"long", DType::I64},    {"int32", DType::I32}, {"int", DType::I32},       {"int16", DType::I16},
      {"int8", DType::I8},     {"uint8", DType::U8},  {"bool", DType::Bool}};
  std::string t = s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
  auto it = torch_names.find(t);
  if (it == torch_names.end()) return std::nullopt;
  return it->second;
}

/// kiln_inputs.json: [{"dtype": "f32", "shape": [1, 3, 64, 64]}, ...]
std::vector<TensorType> parseInputsFile(const std::string& text) {
  std::vector<TensorType> types;
  try {
    auto j = nlohmann::json::parse(text);
    if (!j.is_array()) fail(std::string(kInputsFile) + " in the archive must be a JSON list");
    for (const auto& e : j) {
      std::string name = e.at("dtype").get<std::string>();
      auto d = parseDTypeName(name);
      if (!d) fail(std::string(kInputsFile) + " in the archive has an unknown dtype \"" + name + "\"");
      types.push_back({*d, e.at("shape").get<Shape>()});
    }
  } catch (const nlohmann::json::exception& e) {
    fail(std::string(kInputsFile) + " in the archive is malformed: " + ts::firstLine(e.what()));
  }
  return types;
}

torch::jit::Module loadArchive(const std::string& path, std::string& inputs_json) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("no such file");
  if (std::filesystem::is_directory(path, ec)) fail("is a directory, not a TorchScript archive");
  if (std::filesystem::file_size(path, ec) == 0) fail("empty file; expected a TorchScript archive (torch.jit.save)");
  torch::jit::ExtraFilesMap extra{{kInputsFile, ""}};
  try {
    torch::jit::Module m = torch::jit::load(path, c10::Device(c10::kCPU), extra);
    inputs_json = extra[kInputsFile];
    return m;
  } catch (const c10::Error& e) {
    fail("not a readable TorchScript archive: " + ts::firstLine(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    fail("not a readable TorchScript archive: " + ts::firstLine(e.what()));
  }
}

/// Append `v` and its tensors (tuples and lists flattened) to `out`.
void flattenOutputs(const SV& v, std::vector<SV>& out) {
  if (v.isSequence()) {
    for (const SV& e : *v.items) flattenOutputs(e, out);
  } else if (v.isTensorLike()) {
    out.push_back(v);
  } else if (!v.isNone()) {
    fail("forward returns " + v.describe() + "; Kiln graph outputs must be tensors");
  }
}

/// Copy of `g` with inputs ordered data, `order` (state_dict keys), the rest;
/// nodes no output depends on are dropped, and so are inputs only they used.
Graph rebuild(const Graph& g, const std::vector<std::string>& order) {
  std::unordered_set<const Node*> live;
  std::unordered_set<const Value*> used;
  for (const GraphOutput& o : g.outputs()) used.insert(o.value);
  for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it) {
    const Node* n = it->get();
    bool needed = false;
    for (Value* out : n->outputs()) needed = needed || used.count(out);
    if (!needed) continue;
    live.insert(n);
    for (Value* in : n->inputs()) used.insert(in);
  }
  Graph out;
  out.name = g.name;
  std::unordered_map<const Value*, Value*> map;
  auto add = [&](Value* v) {
    if (!map.count(v)) map[v] = out.addInput(v->name(), v->type(), v->role());
  };
  for (Value* v : g.inputs())
    if (v->role() == ValueRole::Data) add(v);
  std::unordered_map<std::string, Value*> by_name;
  for (Value* v : g.inputs()) by_name[v->name()] = v;
  for (const std::string& key : order) {
    auto it = by_name.find(key);
    if (it != by_name.end() && used.count(it->second)) add(it->second);
  }
  for (Value* v : g.inputs())
    if (used.count(v)) add(v);
  for (const auto& n : g.nodes()) {
    if (!live.count(n.get())) continue;
    std::vector<Value*> ins;
    for (Value* v : n->inputs()) ins.push_back(map.at(v));
    std::vector<TensorType> types;
    for (Value* v : n->outputs()) types.push_back(v->type());
    Node* c = out.createWithTypes(n->op(), ins, n->attrs(), types, n->scope(), n->provenance());
    for (size_t k = 0; k < n->numOutputs(); ++k) map[n->output(k)] = c->output(k);
  }
  for (const GraphOutput& o : g.outputs()) out.addOutput(map.at(o.value), o.name, o.role);
  return out;
}

Model importModel(const std::string& path, const ImportOptions& options) {
  std::string inputs_json;
  torch::jit::Module module = loadArchive(path, inputs_json);
  if (options.keep_going && !options.keep_going()) throw ts::ImportCancelled{};
  auto forward = module.find_method("forward");
  if (!forward) fail("the module has no forward method");

  // Data input types: given, or recorded by models/export.py in the archive.
  std::vector<TensorType> types = options.input_types;
  if (types.empty() && !inputs_json.empty()) types = parseInputsFile(inputs_json);
  const auto& params = forward->function().getSchema().arguments();
  size_t num_args = params.empty() ? 0 : params.size() - 1;
  if (types.empty() && num_args > 0)
    fail("the archive does not record input shapes; pass them (kiln: --input-file or --input-shape)",
         ErrorKind::kInputShapesMissing);
  if (types.size() > num_args)
    fail(std::to_string(types.size()) + " input types given, but forward takes " + std::to_string(num_args) +
         " inputs");

  Model model;
  model.source = path;

  // State dict: weights by key; one graph input per distinct tensor (tied ones alias the first key).
  std::vector<StateEntry> state;
  collectState(module, "", state);
  std::map<std::string, std::string> canonical;
  std::map<std::string, ValueRole> roles;
  std::map<std::tuple<const void*, int64_t, std::vector<int64_t>, std::vector<int64_t>, int>, std::string> seen;
  std::vector<std::string> order;
  for (const StateEntry& e : state) {
    const at::Tensor& t = e.tensor;
    auto id = std::make_tuple(static_cast<const void*>(t.storage().unsafeGetStorageImpl()), t.storage_offset(),
                              t.sizes().vec(), t.strides().vec(), static_cast<int>(t.scalar_type()));
    auto [it, fresh] = seen.emplace(id, e.key);
    canonical[e.key] = it->second;
    if (!fresh) {
      model.aliases[e.key] = it->second;
      continue;
    }
    roles[e.key] = e.role;
    order.push_back(e.key);
    model.weights[e.key] = ts::kilnTensor(t);
  }

  ts::Lowering cx(model);
  std::map<std::string, SV> slots;  // canonical key -> the tensor's slot (created on first use)
  ts::Walker* walker_ptr = nullptr;
  ts::Walker walker(cx, [&](const std::string& key, const at::Tensor& t) -> SV {
    auto c = canonical.find(key);
    if (c == canonical.end()) return SV::constTensor(walker_ptr->constantTensor(t));
    auto s = slots.find(c->second);
    if (s != slots.end()) return s->second;
    const Tensor& w = model.weights.at(c->second);
    SV sv = SV::tensor(model.graph.addInput(c->second, w.type(), roles.at(c->second)));
    slots[c->second] = sv;
    return sv;
  }, options.unsupported);
  walker_ptr = &walker;
  walker.keep_going = options.keep_going;

  std::vector<SV> data;
  for (size_t k = 0; k < types.size(); ++k) {
    const c10::TypePtr& type = params[k + 1].type();
    if (!type->isSubtypeOf(*c10::TensorType::get()) &&
        !type->isSubtypeOf(*c10::OptionalType::create(c10::TensorType::get())))
      fail("forward argument '" + params[k + 1].name() + "' is a " + type->str() + ", not a tensor");
    data.push_back(SV::tensor(model.graph.addInput("input" + std::to_string(k), types[k], ValueRole::Data)));
  }
  std::vector<SV> results = walker.callMethod(walker.object(module, ""), "forward", std::move(data));
  if (options.unsupported && !options.unsupported->empty())
    fail(std::to_string(options.unsupported->size()) + " nodes could not be imported (kiln check lists them)");

  cx.scope.clear();
  cx.provenance.clear();
  std::vector<SV> outputs;
  for (const SV& r : results) flattenOutputs(r, outputs);
  for (size_t k = 0; k < outputs.size(); ++k) model.graph.addOutput(cx.read(outputs[k]), "output" + std::to_string(k));
  for (const std::string& key : order) {
    auto s = slots.find(key);
    if (roles.at(key) == ValueRole::Buffer && s != slots.end() && s->second.slot->version > 0)
      model.graph.addOutput(cx.read(s->second), key, OutputRole::BufferUpdate);
  }
  model.graph = rebuild(model.graph, order);
  // Constants the walk made that the rebuilt graph no longer reads (a traced
  // loop's per-write element masks: 1152 tensors, 264 MB for 64 steps of an
  // LSTMCell over [32, 2048] gates) would otherwise live as long as the model.
  std::erase_if(model.weights, [&](const auto& kv) {
    return !canonical.count(kv.first) && model.graph.findInput(kv.first) == nullptr;
  });
  return model;
}

/// One line: newlines from nested messages become "; ".
std::string oneLine(std::string s) {
  for (size_t p; (p = s.find('\n')) != std::string::npos;) s.replace(p, 1, "; ");
  return s;
}

}  // namespace

Result<Model> importTorchScript(const std::string& path, const ImportOptions& options) {
  try {
    return importModel(path, options);
  } catch (const ts::ImportCancelled&) {
    return Error{path + ": cancelled", ErrorKind::kCancelled};
  } catch (const KilnException& e) {
    return Error{path + ": " + oneLine(e.what()), e.kind()};
  } catch (const c10::Error& e) {
    return Error{path + ": " + ts::firstLine(e.what_without_backtrace())};
  } catch (const std::bad_alloc&) {
    return Error{path + ": out of memory"};
  } catch (const std::exception& e) {
    return Error{path + ": " + ts::firstLine(e.what())};
  }
}

}  // namespace kiln
