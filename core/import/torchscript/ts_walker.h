// Walks a TorchScript method graph node by node, evaluating what is known at
// import time (static_eval.h) and lowering the rest to Kiln ops (lowering.h).
//
// Calls are inlined during the walk rather than with torch::jit::Inline
// first: prim::CallMethod enters the callee's graph with the callee module's
// path as the scope of everything it emits. Inline's callstacks keep only the
// last attribute name of each call (`0` for `self.h[0]`, losing `h`), so the
// walk is what gives exact state_dict-style scopes such as `h.0.attn` or
// `layer1.0.conv1`. prim::If with a known condition walks the taken block;
// prim::Loop with a known trip count is unrolled; anything data-dependent is
// an error naming the node.
#pragma once

#include <torch/script.h>

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/import/import_options.h"
#include "core/import/torchscript/lowering.h"
#include "core/result.h"

namespace kiln::ts {

/// Resolves a tensor attribute of a module (a parameter, buffer or plain
/// tensor attribute) reached at `path` (e.g. "layer1.0.conv1.weight").
using TensorAttrResolver = std::function<SV(const std::string& path, const at::Tensor& t)>;

/// Exception whose message already names the TorchScript node it came from.
class NodeError : public KilnException {
 public:
  using KilnException::KilnException;
};

/// Thrown when ImportOptions::keep_going says stop: not a KilnException,
/// so no node's handler turns it into that node's error on the way out.
struct ImportCancelled {};

class Walker {
 public:
  /// Asked every few hundred nodes (ImportOptions::keep_going); false
  /// throws ImportCancelled.
  std::function<bool()> keep_going;

  /// `unsupported`: kiln check's list (ImportOptions::unsupported); null
  /// stops at the first op that cannot be imported.
  Walker(Lowering& cx, TensorAttrResolver resolve, std::vector<UnsupportedOp>* unsupported = nullptr)
      : cx_(cx), resolve_(std::move(resolve)), unsupported_(unsupported) {}

  /// An SV for a module object at `path` ("" for the root).
  SV object(const torch::jit::Object& obj, const std::string& path);
  /// Walk `method` of the module `self` (an Object SV) with `args` bound to
  /// its parameters after self; returns the method's outputs.
  std::vector<SV> callMethod(const SV& self, const std::string& method, std::vector<SV> args);
  /// Convert an IValue known at import time (constants, attributes, defaults).
  SV fromIValue(const c10::IValue& v, const std::string& path = {});
  /// A Kiln tensor holding a copy of `t` (one copy per distinct tensor).
  Tensor constantTensor(const at::Tensor& t);

 private:
  struct Frame {
    std::unordered_map<const torch::jit::Value*, SV> env;
    std::string scope;  ///< module path of `self` in this call
  };

  std::vector<SV> walkGraph(torch::jit::Graph& g, std::vector<SV> inputs, const std::string& scope);
  void walkBlock(torch::jit::Block* b, Frame& f);
  size_t visited_ = 0;  ///< nodes visited, for keep_going
  void visit(torch::jit::Node* n, Frame& f);
  void visitGeneric(torch::jit::Node* n, Frame& f, std::vector<SV> args);
  void visitIf(torch::jit::Node* n, Frame& f);
  void visitLoop(torch::jit::Node* n, Frame& f);
  void visitGetAttr(torch::jit::Node* n, Frame& f);
  void visitSetAttr(torch::jit::Node* n, Frame& f);
  void visitCall(torch::jit::Node* n, Frame& f, std::vector<SV> args);
  SV constantOf(torch::jit::Node* n);

  const SV& lookup(const torch::jit::Value* v, Frame& f);
  void bind(torch::jit::Node* n, Frame& f, std::vector<SV> outs);
  /// "aten::add at torch/nn/functional.py:12 (scope layer1.conv)"
  std::string where(torch::jit::Node* n, const Frame& f) const;
  std::string scopeOf(torch::jit::Node* n, const Frame& f) const;
  [[noreturn]] void unsupported(torch::jit::Node* n, const Frame& f, const std::string& kind);
  /// kiln check: record why `n` could not be imported and make its results Unsupported.
  void skip(torch::jit::Node* n, Frame& f, const std::string& message);
  /// kiln check: results of `n` Unsupported when an input is; true if so.
  bool skipDependent(torch::jit::Node* n, Frame& f, const std::vector<SV>& args);

  Lowering& cx_;
  TensorAttrResolver resolve_;
  std::vector<UnsupportedOp>* unsupported_;
  std::vector<torch::jit::Object> objects_;
  std::map<std::string, int64_t> object_by_path_;
  std::vector<torch::jit::Function*> functions_;
  std::map<std::string, SV> attr_overrides_;  ///< non-tensor attributes set by prim::SetAttr
  std::map<std::string, Tensor> constants_;
  int depth_ = 0;
};

/// "torch/nn/modules/conv.py:459" for a node, or "" when it has no source.
std::string sourceLocation(const torch::jit::Node* n);
/// A contiguous CPU copy of `t` as a Kiln tensor (fails for complex/quantized dtypes).
Tensor kilnTensor(const at::Tensor& t);
/// The first non-empty line of a (possibly multi-line) libtorch message.
std::string firstLine(const std::string& message);

}  // namespace kiln::ts
