// Kiln's graph IR: SSA values with static TensorTypes, nodes in topological
// order, graph inputs with roles. See core/op_table.h for what ops exist and
// core/text_ir.h for the text form:
//
//   %7 = matmul(%5, %w3) {transpose_b=1} : f32[32,512] @layer1.fc
#pragma once

#include <list>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/attribute.h"
#include "core/op_names.h"
#include "core/tensor_type.h"

namespace kiln {

struct OpDef;
class Node;
class Graph;

/// What a graph input is. Param/Buffer inputs are named exactly like the
/// PyTorch state_dict() key; Data inputs are input0, input1, ...
enum class ValueRole : uint8_t { Data, Param, Buffer, Const, OptState, Scalar, Intermediate };
std::string_view roleName(ValueRole r);
std::optional<ValueRole> parseRole(std::string_view s);

/// What a graph output is. BufferUpdate / ParamUpdate / OptStateUpdate outputs
/// carry the new value of the input whose name they hold (e.g. BatchNorm
/// running stats in training); Gradient outputs hold d(loss)/d(the param
/// they are named after), produced by autodiff and consumed by the optimizer.
enum class OutputRole : uint8_t { Output, BufferUpdate, ParamUpdate, OptStateUpdate, Loss, Metric, Gradient };
std::string_view outputRoleName(OutputRole r);
std::optional<OutputRole> parseOutputRole(std::string_view s);

/// A use of a value: input slot `index` of `user`.
struct Use {
  Node* user;
  size_t index;
};

/// An SSA value: a graph input or one output of a node.
class Value {
 public:
  int id() const { return id_; }
  /// Graph inputs: state_dict key or inputN. Intermediates: empty.
  const std::string& name() const { return name_; }
  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  ValueRole role() const { return role_; }
  /// The node that defines this value, or nullptr for a graph input.
  Node* producer() const { return producer_; }
  size_t outputIndex() const { return output_index_; }
  const std::vector<Use>& uses() const { return uses_; }
  bool isGraphInput() const { return producer_ == nullptr; }

  void setType(TensorType t) { type_ = std::move(t); }

 private:
  friend class Graph;
  friend class Node;
  int id_ = -1;
  std::string name_;
  TensorType type_;
  ValueRole role_ = ValueRole::Intermediate;
  Node* producer_ = nullptr;
  size_t output_index_ = 0;
  std::vector<Use> uses_;
};

/// One operation. Attributes missing from `attrs()` take the op table's
/// default; the typed getters below apply it.
class Node {
 public:
  const OpDef& def() const { return *def_; }
  /// The op's name (for messages, text and JSON; compare with is()).
  const std::string& op() const;
  /// The op as a symbol (core/op_names.h).
  Op kind() const { return kind_; }
  bool is(Op op) const { return kind_ == op; }
  std::span<Value* const> inputs() const { return inputs_; }
  Value* input(size_t i) const { return inputs_.at(i); }
  size_t numInputs() const { return inputs_.size(); }
  std::span<Value* const> outputs() const { return output_ptrs_; }
  Value* output(size_t i = 0) const { return output_ptrs_.at(i); }
  size_t numOutputs() const { return output_ptrs_.size(); }

  const AttrMap& attrs() const { return attrs_; }
  bool hasAttr(const std::string& name) const { return attrs_.count(name) != 0; }
  void setAttr(const std::string& name, Attr value) { attrs_[name] = std::move(value); }
  /// Typed getters; fall back to the op table default; throw KilnException
  /// naming the node when the attribute is missing or of another kind.
  int64_t i(const std::string& name) const;
  double f(const std::string& name) const;
  const std::vector<int64_t>& is(const std::string& name) const;
  const std::vector<double>& fs(const std::string& name) const;
  const std::string& s(const std::string& name) const;
  DType dt(const std::string& name) const;
  /// A graph-valued attribute: the region the node owns (a fused body).
  const Graph& subgraph(const std::string& name) const;
  /// The attribute (explicit or default), or nullptr when neither exists.
  const Attr* attr(const std::string& name) const;

  /// Module path this node came from, e.g. "layer1.0.conv1" (may be empty).
  const std::string& scope() const { return scope_; }
  void setScope(std::string s) { scope_ = std::move(s); }
  /// Where it came from: an import location ("model.py:12") or an earlier node.
  const std::string& provenance() const { return provenance_; }
  void setProvenance(std::string p) { provenance_ = std::move(p); }

  /// Replace input slot `i`, keeping use lists right.
  void replaceInput(size_t i, Value* v);
  /// "conv2d @layer1.0.conv1" for error messages.
  std::string describe() const;

 private:
  friend class Graph;
  Node() = default;
  const OpDef* def_ = nullptr;
  Op kind_{};
  std::vector<Value*> inputs_;
  std::vector<std::unique_ptr<Value>> outputs_;
  std::vector<Value*> output_ptrs_;
  AttrMap attrs_;
  std::string scope_, provenance_;
  std::list<std::unique_ptr<Node>>::iterator pos_;
};

/// A graph output with its role and name ("output0", or the buffer name).
struct GraphOutput {
  Value* value;
  std::string name;
  OutputRole role = OutputRole::Output;
};

/// A whole graph. Nodes are kept in topological order; new nodes go at the
/// insertion point (the end, unless setInsertPoint was called).
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  std::string name = "main";

  /// Add a graph input. Names must be unique (throws KilnException).
  Value* addInput(const std::string& name, TensorType type, ValueRole role);
  const std::vector<Value*>& inputs() const { return input_ptrs_; }
  Value* findInput(const std::string& name) const;

  /// Create a node; output types come from the op's shape inference.
  /// Throws KilnException (naming op, scope and the problem) on bad inputs.
  Node* create(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {}, std::string scope = {},
               std::string provenance = {});
  /// Same, with given output types (the parser; inference is checked by the verifier).
  Node* createWithTypes(std::string_view op, std::vector<Value*> inputs, AttrMap attrs,
                        std::vector<TensorType> output_types, std::string scope = {},
                        std::string provenance = {});
  /// create() for single-output ops; returns the output.
  Value* add(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {}, std::string scope = {},
             std::string provenance = {});

  /// Nodes in order.
  const std::list<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t numNodes() const { return nodes_.size(); }
  /// New nodes go before `before` (nullptr: at the end).
  void setInsertPoint(Node* before);
  /// Remove a node whose outputs have no uses (throws otherwise).
  void erase(Node* n);
  /// Run the nodes in `order`: a permutation of nodes() in which every node
  /// comes after the producers of its inputs (throws KilnException otherwise,
  /// leaving the graph as it was).
  void reorder(const std::vector<Node*>& order);
  /// Point every use of `from` (nodes and graph outputs) at `to`.
  void replaceAllUsesWith(Value* from, Value* to);

  void addOutput(Value* v, std::string name, OutputRole role = OutputRole::Output);
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  std::vector<GraphOutput>& mutableOutputs() { return outputs_; }

  /// Remove graph inputs that nothing uses (returns how many).
  size_t removeUnusedInputs();
  /// Remove one graph input that nothing uses (throws KilnException if used).
  void removeInput(Value* v);
  /// Deep copy (same value ids, names, scopes, provenance).
  Graph clone() const;

 private:
  Node* createNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs, std::string scope,
                   std::string provenance);
  void finishNode(Node* n, std::vector<TensorType> types);
  int next_id_ = 0;
  std::vector<std::unique_ptr<Value>> inputs_;
  std::vector<Value*> input_ptrs_;
  std::list<std::unique_ptr<Node>> nodes_;
  Node* insert_before_ = nullptr;  ///< nullptr: append
  std::vector<GraphOutput> outputs_;
};

}  // namespace kiln
