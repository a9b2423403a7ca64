// The FX importer proper: placeholders and constants become graph inputs
// bound to checked weights, nodes are lowered in order through the rule
// table (fx_lowering_*.cpp) and checked against their recorded `val`, then
// outputs and buffer mutations become graph outputs. Errors are one line,
// prefixed with the file, and name the node, its op, source and scope.
#include "core/import/fx/fx_importer.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/file_io.h"
#include "core/import/fx/fx_document.h"
#include "core/import/fx/fx_lowering.h"
#include "core/op_table.h"
#include "core/safetensors.h"
#include "core/verifier.h"

namespace kiln {
namespace fx {
namespace {

std::string kindName(FxPlaceholder::Kind k) {
  switch (k) {
    case FxPlaceholder::Kind::Param: return "parameter";
    case FxPlaceholder::Kind::Buffer: return "buffer";
    case FxPlaceholder::Kind::Input: return "input";
    case FxPlaceholder::Kind::Constant: return "constant";
  }
  return "?";
}

/// "at models/zoo.py:69 (forward) (scope conv1)"
std::string location(const FxNode& n) {
  std::string s = n.source.empty() ? "(no source location)" : "at " + escaped(n.source);
  return s + " (scope " + (n.scope.empty() ? std::string("<root>") : escaped(n.scope)) + ")";
}

/// "node 'conv' (aten.convolution.default at models/zoo.py:69 (forward) (scope conv1))"
std::string nodeContext(const FxNode& n) {
  return "node " + quote(n.name) + " (" + escaped(n.target) + " " + location(n) + ")";
}

/// "unsupported op aten.foo.default at SOURCE (scope SCOPE)" plus what is supported nearby.
std::string unsupportedMessage(const FxNode& n) {
  std::string msg = "unsupported op " + escaped(n.target) + " " + location(n);
  // Other overloads of the same op that Kiln does lower, if any.
  std::string base = n.target.substr(0, n.target.rfind('.') + 1);
  std::string same;
  auto all = fxRuleTargets();
  if (base.size() > 1)
    for (const std::string& t : all)
      if (t.compare(0, base.size(), base) == 0) same += (same.empty() ? "" : ", ") + t;
  if (!same.empty()) return msg + "; supported overloads of " + escaped(base.substr(0, base.size() - 1)) + ": " + same;
  return msg + "; the FX importer lowers " + std::to_string(all.size()) + " aten overloads (fxSupportedOps())";
}

class Importer {
 public:
  Importer(const FxDocument& doc, const TensorMap& weights, const ImportOptions& options)
      : doc_(doc), weights_(weights), options_(options), cx_(model_.graph) {
    cx_.weights = &model_.weights;
  }

  Model run() {
    if (options_.training && !doc_.train) refuseEvalBatchNorm();
    addInputs();
    addAliases();
    size_t lowered = 0;
    for (const FxNode& n : doc_.nodes) {
      if (++lowered % kNodesBetweenCancelChecks == 0) stopIfCancelled(options_);
      lowerNode(n);
    }
    if (options_.unsupported && !options_.unsupported->empty())
      fail(std::to_string(options_.unsupported->size()) + " nodes could not be imported (kiln check lists them)");
    for (auto& [name, t] : cx_.constants) model_.weights[name] = t;
    addOutputs();
    addMutations();
    removeDeadNodes();
    Status ok = verify(model_.graph);
    if (!ok) fail("internal error: the imported graph does not verify: " + ok.error().message);
    return std::move(model_);
  }

 private:
  const Tensor& weight(const FxPlaceholder& p) {
    auto it = weights_.find(p.key);
    if (it == weights_.end()) fail(kindName(p.kind) + " " + quote(p.key) + " is missing from the weights file");
    if (it->second.type() != p.type)
      fail(kindName(p.kind) + " " + quote(p.key) + ": the weights file holds " + it->second.type().str() +
           ", the graph declares " + p.type.str());
    return it->second;
  }

  Value* addInput(const FxPlaceholder& p, const std::string& name, ValueRole role) {
    if (model_.graph.findInput(name))
      fail(kindName(p.kind) + " " + quote(p.name) + ": graph input " + quote(name) + " is defined twice");
    Value* v = model_.graph.addInput(name, p.type, role);
    cx_.define(p.name, FxValue::of(v));
    by_name_[p.name] = &p;
    return v;
  }

  void addInputs() {
    int64_t inputs = 0;
    for (const FxPlaceholder& p : doc_.placeholders) {
      if (p.kind == FxPlaceholder::Kind::Input) {
        if (p.index != inputs)
          fail("placeholder " + quote(p.name) + " is input " + std::to_string(p.index) + ", expected input " +
               std::to_string(inputs) + " (inputs must come in forward-argument order)");
        addInput(p, "input" + std::to_string(inputs++), ValueRole::Data);
        continue;
      }
      bool param = p.kind == FxPlaceholder::Kind::Param;
      addInput(p, p.key, param ? ValueRole::Param : ValueRole::Buffer);
      if (!doc_.shapes_only) model_.weights[p.key] = weight(p);
    }
    for (const FxPlaceholder& c : doc_.constants) {
      std::string name = "__const." + c.name;
      addInput(c, name, ValueRole::Const);
      if (!doc_.shapes_only) model_.weights[name] = weight(c);
    }
    model_.shapes_only = doc_.shapes_only;
    if (options_.input_types.empty()) return;
    // FX dumps are traced for one set of example shapes; Kiln cannot re-trace them.
    std::vector<Value*> data;
    for (Value* v : model_.graph.inputs())
      if (v->role() == ValueRole::Data) data.push_back(v);
    if (options_.input_types.size() != data.size())
      fail(std::to_string(options_.input_types.size()) + " input types were given, but the dump has " +
           std::to_string(data.size()) + " inputs");
    for (size_t i = 0; i < data.size(); ++i)
      if (options_.input_types[i] != data[i]->type())
        fail("FX dumps are specialized to their example shapes: " + data[i]->name() + " is " +
             data[i]->type().str() + " in the dump, but " + options_.input_types[i].str() +
             " was requested; re-export the model with inputs of that shape");
  }

  /// Model::aliases from the top-level map and the placeholders' lists (they must agree).
  void addAliases() {
    std::map<std::string, std::string> keys;  // canonical key -> kind, for validation
    for (const FxPlaceholder& p : doc_.placeholders)
      if (p.kind != FxPlaceholder::Kind::Input) keys[p.key] = kindName(p.kind);
    auto add = [&](const std::string& alias, const std::string& key) {
      if (!keys.count(key)) fail("alias " + quote(alias) + " names " + quote(key) + ", which is no parameter or buffer");
      if (keys.count(alias) || model_.graph.findInput(alias))
        fail("alias " + quote(alias) + " is also the name of a graph input");
      auto [it, fresh] = model_.aliases.emplace(alias, key);
      if (!fresh && it->second != key)
        fail("alias " + quote(alias) + " is tied to both " + quote(it->second) + " and " + quote(key));
    };
    for (const auto& [alias, key] : doc_.aliases) add(alias, key);
    for (const FxPlaceholder& p : doc_.placeholders)
      for (const std::string& alias : p.aliases) add(alias, p.key);
  }

  FxValue getitem(const FxNode& n) {
    if (n.args.size() != 2 || n.args[0].kind != FxArg::Kind::Node || n.args[1].kind != FxArg::Kind::Int)
      fail("operator.getitem expects args [{\"node\": NAME}, INDEX]");
    const FxValue& src = cx_.lookup(n.args[0].s);
    if (!src.is_tuple) fail(quote(n.args[0].s) + " is not a tuple or list");
    int64_t size = static_cast<int64_t>(src.items.size()), i = n.args[1].i;
    if (i < -size || i >= size)
      fail("index " + std::to_string(i) + " is out of range for " + std::to_string(size) + " elements");
    return src.items[static_cast<size_t>(i < 0 ? i + size : i)];
  }

  /// kiln check: whether an argument of `n` is the result of a skipped node.
  bool dependsOnSkipped(const FxArg& a) const {
    if (a.kind == FxArg::Kind::Node) return skipped_.count(a.s) > 0;
    for (const FxArg& item : a.items)
      if (dependsOnSkipped(item)) return true;
    return false;
  }
  bool dependsOnSkipped(const FxNode& n) const {
    for (const FxArg& a : n.args)
      if (dependsOnSkipped(a)) return true;
    for (const auto& [name, a] : n.kwargs)
      if (dependsOnSkipped(a)) return true;
    return false;
  }
  /// kiln check: record why `n` could not be imported; its results are unknown.
  void skip(const FxNode& n, const std::string& reason) {
    options_.unsupported->push_back({n.target, reason, n.source, n.scope});
    skipped_.insert(n.name);
  }

  void lowerNode(const FxNode& n) {
    if (options_.unsupported && dependsOnSkipped(n)) {
      skipped_.insert(n.name);
      return;
    }
    const bool arithmetic = isPythonArithmetic(n.target), builtin = arithmetic || n.target == "operator.getitem";
    const FxRule* rule = builtin ? nullptr : findFxRule(n.target);
    if (!rule && !builtin) {
      if (!options_.unsupported) fail(unsupportedMessage(n));
      const std::string msg = unsupportedMessage(n), head = "unsupported op " + escaped(n.target) + " " + location(n);
      return skip(n, "no lowering" + msg.substr(head.size()));
    }
    cx_.scope = n.scope;
    cx_.provenance = n.source;
    cx_.inplace.clear();
    try {
      FxValue v;
      if (!rule) {
        v = arithmetic ? lowerPythonArithmetic(cx_, n) : getitem(n);
      } else {
        auto schema = doc_.ops.find(n.target);
        if (schema == doc_.ops.end()) fail("the dump has no schema for it in \"ops\"");
        const std::optional<FxNode> sized = withKnownNumbers(cx_, n);  // symbolic sizes as numbers
        NodeArgs args(cx_, sized ? *sized : n, schema->second, rule->kiln);
        v = rule->fn(cx_, args);
      }
      checkVal(n.val, v, "");
      if (!cx_.inplace.empty())
        inplace_[n.name] = std::map<std::string, Value*, std::less<>>(cx_.inplace.begin(), cx_.inplace.end());
      cx_.define(n.name, std::move(v));
    } catch (const KilnException& e) {
      if (options_.unsupported) return skip(n, e.what());
      fail(nodeContext(n) + ": " + e.what());
    }
  }

  /// An eval-mode dump trains as it was traced (no dropout; the inference
  /// fast paths decomposed), as an eval-mode TorchScript archive does, except
  /// where that would silently train something else than the module in
  /// train mode: BatchNorm normalizing by its running statistics.
  void refuseEvalBatchNorm() const {
    for (const FxNode& n : doc_.nodes)
      if (n.target.find("batch_norm") != std::string::npos)
        fail("this dump was traced in eval mode, where BatchNorm (node " + quote(n.name) +
             ") uses its running statistics; to train it, re-export it in train mode "
             "(models/export.py NAME --format fx --train)");
  }

  /// The lowering must produce exactly the dtype/shape the dump recorded.
  void checkVal(const FxVal& val, const FxValue& v, const std::string& item) {
    if (!v.unavailable.empty()) return;  // not computed; a use fails with the reason
    std::string what = item.empty() ? "" : "result " + item + ": ";
    if (v.number) {  // a symbolic size: the dump records a number ({"scalar": ...}) or a SymInt
      if (val.kind == FxVal::Kind::Tensor || val.kind == FxVal::Kind::Items)
        fail(what + "the dump records " + val.describe() + ", but Kiln computed a number");
      return;
    }
    if (val.kind == FxVal::Kind::Items) {
      if (!v.is_tuple || v.items.size() != val.items.size())
        fail(what + "the dump records " + val.describe() + ", Kiln produced " +
             (v.is_tuple ? std::to_string(v.items.size()) + " results" : "one tensor"));
      for (size_t i = 0; i < val.items.size(); ++i)
        checkVal(val.items[i], v.items[i], item + (item.empty() ? "" : ".") + std::to_string(i));
      return;
    }
    if (val.kind != FxVal::Kind::Tensor)
      fail(what + "the dump records " + val.describe() + ", but Kiln lowered it to a tensor");
    if (!val.dtype) fail(what + "dtype " + quote(val.dtype_name) + " is not supported by Kiln");
    if (!v.tensor) fail(what + "the dump records a tensor " + val.describe() + ", Kiln produced a tuple");
    TensorType expect{*val.dtype, val.shape};
    if (v.tensor->type() != expect)
      fail(what + "Kiln computes " + v.tensor->type().str() + " but the dump records " + expect.str() +
           " (a lowering bug or an inconsistent dump)");
  }

  Value* tensorNamed(const std::string& name, const std::string& what) {
    const FxValue& v = cx_.lookup(name);
    if (!v.unavailable.empty()) fail(what + " " + quote(name) + " cannot be used: " + v.unavailable);
    if (v.number) fail(what + " " + quote(name) + " is a number (a size), not a tensor");
    if (!v.tensor) fail(what + " " + quote(name) + " is a tuple, not a tensor");
    return v.tensor;
  }

  Value* tensorRef(const FxArg& a, const std::string& what) {
    if (a.kind != FxArg::Kind::Node) fail(what + " must be a tensor reference, got " + argKindName(a.kind));
    return tensorNamed(a.s, what);
  }

  void addOutputs() {
    cx_.scope.clear();
    cx_.provenance.clear();
    for (size_t i = 0; i < doc_.outputs.size(); ++i)
      model_.graph.addOutput(tensorRef(doc_.outputs[i], "output " + std::to_string(i)), "output" + std::to_string(i));
  }

  /// New buffer contents: a node's value ("value") or what an op wrote into its argument ("inplace").
  void addMutations() {
    std::set<std::string> done;
    for (const FxMutation& m : doc_.mutations) {
      std::string what = "mutation of " + quote(m.key);
      auto it = by_name_.find(m.placeholder);
      if (it == by_name_.end()) fail(what + ": " + quote(m.placeholder) + " is not a placeholder");
      const FxPlaceholder& p = *it->second;
      if (p.key != m.key) fail(what + ": placeholder " + quote(p.name) + " has key " + quote(p.key));
      if (p.kind != FxPlaceholder::Kind::Buffer)
        fail(what + ": the forward updates a " + kindName(p.kind) + " in place; Kiln supports updates of buffers only");
      if (!done.insert(m.key).second) fail(what + ": listed twice");
      Value* v = m.inplace ? inplaceUpdate(m, what) : tensorNamed(m.node, what);
      if (v->shape() != p.type.shape)
        fail(what + ": the new value is " + v->type().str() + ", the buffer is " + p.type.str());
      model_.graph.addOutput(cx_.cast(v, p.type.dtype), m.key, OutputRole::BufferUpdate);
    }
  }

  Value* inplaceUpdate(const FxMutation& m, const std::string& what) {
    const FxNode* node = nullptr;
    for (const FxNode& n : doc_.nodes)
      if (n.name == m.node) node = &n;
    if (!node) fail(what + ": no node " + quote(m.node));
    if (node->target != m.op) fail(what + ": node " + quote(m.node) + " is " + quote(node->target) + ", not " + quote(m.op));
    const FxSchema& schema = doc_.ops.at(node->target);  // lowering the node found it
    if (m.arg < 0 || m.arg >= static_cast<int64_t>(schema.args.size()))
      fail(what + ": argument index " + std::to_string(m.arg) + " is out of range");
    const std::string& arg_name = schema.args[static_cast<size_t>(m.arg)].name;
    const FxArg* given = static_cast<size_t>(m.arg) < node->args.size() ? &node->args[static_cast<size_t>(m.arg)] : nullptr;
    for (const auto& [k, a] : node->kwargs)
      if (k == arg_name) given = &a;
    if (!given || given->kind != FxArg::Kind::Node || given->s != m.placeholder)
      fail(what + ": argument " + quote(arg_name) + " of node " + quote(m.node) + " is not " + quote(m.placeholder));
    auto updates = inplace_.find(m.node);
    if (updates == inplace_.end() || !updates->second.count(arg_name))
      fail(what + ": Kiln's lowering of node " + quote(m.node) + " does not update " + quote(arg_name) +
           " (only batch norm in training mode updates its running statistics)");
    return updates->second.at(arg_name);
  }

  /// Drop nodes nothing reads (e.g. the permute of a weight folded into `linear`).
  void removeDeadNodes() {
    Graph& g = model_.graph;
    std::set<const Value*> outputs;
    for (const GraphOutput& o : g.outputs()) outputs.insert(o.value);
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      if (n->def().has(kSideEffect)) continue;
      bool used = false;
      for (Value* v : n->outputs()) used = used || !v->uses().empty() || outputs.count(v);
      if (!used) g.erase(n);
    }
  }

  const FxDocument& doc_;
  const TensorMap& weights_;
  const ImportOptions& options_;
  Model model_;
  Lowering cx_;
  std::map<std::string, const FxPlaceholder*> by_name_;
  std::map<std::string, std::map<std::string, Value*, std::less<>>> inplace_;
  std::set<std::string> skipped_;  ///< kiln check: nodes not imported, and those computed from them
};

/// One line: control characters (from hostile names) become spaces.
std::string oneLine(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return s;
}

template <typename Fn>
Result<Model> guarded(const std::string& where, Fn&& fn) {
  try {
    return fn();
  } catch (const KilnException& e) {
    return Error{oneLine(where + ": " + e.what()), e.kind()};
  } catch (const std::bad_alloc&) {
    return Error{where + ": out of memory"};
  } catch (const std::exception& e) {
    return Error{oneLine(where + ": internal error: " + e.what())};
  }
}

Model importDocument(const FxDocument& doc, const TensorMap& weights, const std::string& where,
                     const ImportOptions& options) {
  Model m = Importer(doc, weights, options).run();
  m.source = where;
  m.graph.name = std::filesystem::path(where).filename().string();
  if (auto dot = m.graph.name.find('.'); dot != std::string::npos && dot > 0) m.graph.name.resize(dot);
  return m;
}

}  // namespace
}  // namespace fx

Result<Model> importFxJson(const std::string& json_text, const TensorMap& weights, const std::string& where,
                           const ImportOptions& options) {
  return fx::guarded(where, [&] { return fx::importDocument(fx::parseFxDocument(json_text), weights, where, options); });
}

Result<Model> importFx(const std::string& path, const ImportOptions& options) {
  auto text = readFile(path);
  if (!text.ok()) return text.error();
  return fx::guarded(path, [&] {
    fx::FxDocument doc = fx::parseFxDocument(*text);
    if (doc.shapes_only) {
      if (!doc.weights_file.empty()) fail("a shapes-only dump (\"shapes_only\": true) names a \"weights_file\"");
      return fx::importDocument(doc, TensorMap{}, path, options);
    }
    if (doc.weights_file.empty()) fail("the dump names no \"weights_file\"");
    std::filesystem::path weights_path = std::filesystem::path(path).parent_path() / doc.weights_file;
    auto weights = readSafetensors(weights_path.string());
    if (!weights.ok()) fail("weights file: " + weights.error().message);
    return fx::importDocument(doc, weights->tensors, path, options);
  });
}

std::vector<std::string> fxSupportedOps() {
  auto ops = fx::fxRuleTargets();
  ops.push_back("operator.getitem");
  for (std::string& t : fx::pythonArithmeticTargets()) ops.push_back(std::move(t));
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace kiln
