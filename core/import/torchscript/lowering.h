// The context in which aten ops are lowered to Kiln ops: emitting nodes with
// the current scope and provenance, reading tensors (re-reading views after
// in-place writes, turning constants into `full` nodes or Const inputs),
// PyTorch's dtype rules for mixed tensor/scalar operands, typed access to a
// node's arguments, and the rule table that maps aten op names to lowering
// functions (one table per op family, aten_lowering_*.cpp). No torch headers:
// the walker (ts_walker.cpp) turns TorchScript values into SVs first.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/import/torchscript/static_eval.h"
#include "core/import/torchscript/static_value.h"
#include "core/model.h"

namespace kiln::ts {

/// Lowering state for one import.
class Lowering {
 public:
  explicit Lowering(Model& model) : model_(model) {}

  Graph& graph() { return model_.graph; }
  Model& model() { return model_; }

  /// Scope and provenance given to every node emitted now (set by the walker per TorchScript node).
  std::string scope, provenance;

  /// Emit a node / a single-output node with the current scope and provenance.
  Node* emitNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});
  Value* emit(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});

  /// The run-time value of a tensor-like SV: a view whose base was written in
  /// place is re-read; a constant becomes a `full` (0-d) or a Const input;
  /// a Python number becomes a 0-d `full` of its default dtype.
  Value* read(const SV& v);
  /// A 0-d `full` holding `value` as `dtype`.
  Value* scalar(double value, DType dtype);
  /// `v` as a tensor of `dtype`: numbers become `full`, tensors are cast if needed.
  Value* operand(const SV& v, DType dtype);
  /// Cast unless already `dtype`.
  Value* cast(Value* v, DType dtype);
  /// A Const graph input (`__const.N`) holding `t`; the same buffer gives the same input.
  Value* constInput(const Tensor& t);

  /// A new tensor SV for a value computed at run time.
  SV fresh(Value* v) { return SV::tensor(v); }
  /// A view of `src` made by `step`, whose value is `v` (tracked for in-place writes).
  SV view(const SV& src, const ViewStep& step, Value* v);
  /// In-place write: the tensor behind `target` (and every alias) now holds `v`,
  /// cast and broadcast to its type; writes into a view update its base.
  void write(const SV& target, Value* v);
  /// Whether `v` depends on a parameter (prim::requires_grad).
  bool requiresGrad(Value* v);

 private:
  Value* replay(Value* root, const std::vector<ViewStep>& steps);
  /// `v` written into `root` through `steps`; `covered` gets the root
  /// elements it wrote (null when it wrote all of them).
  Value* writeBack(Value* root, const std::vector<ViewStep>& steps, Value* v, std::shared_ptr<const Tensor>& covered);
  /// Whether no write into the root since `s` was read touched its elements.
  bool untouched(TensorSlot& s);

  Model& model_;
  std::map<const void*, Value*> const_inputs_;
  std::unordered_map<Value*, bool> requires_grad_;
  int next_const_ = 0;
};

/// The arguments of one TorchScript node as SVs, with typed accessors that
/// fail with a message naming the argument position and what was found.
class Args {
 public:
  Args(Lowering& cx, std::span<const SV> values, std::string_view kiln_op = {})
      : cx_(cx), values_(values), kiln_op(kiln_op) {}

  size_t size() const { return values_.size(); }
  const SV& operator[](size_t k) const;
  /// Present and not None.
  bool given(size_t k) const { return k < values_.size() && !values_[k].isNone(); }

  Value* tensor(size_t k);
  int64_t integer(size_t k) const;
  double real(size_t k) const;
  bool flag(size_t k) const;
  const std::string& str(size_t k) const;
  /// An int list (a single int is a one-element list).
  std::vector<int64_t> ints(size_t k) const;
  std::optional<int64_t> optInt(size_t k) const;
  std::optional<double> optReal(size_t k) const;
  std::optional<DType> optDType(size_t k) const;

  /// The rule's third column: the Kiln op (or the variant, e.g. "1d", "feature")
  /// for lowering functions that serve several aten ops.
  std::string_view kiln_op;

 private:
  Lowering& cx_;
  std::span<const SV> values_;
};

/// Lower one aten op; returns one SV per TorchScript output.
using LowerFn = std::vector<SV> (*)(Lowering& cx, Args& a);

/// One row of the aten -> Kiln table.
struct AtenRule {
  std::string_view aten;  ///< "aten::relu"
  LowerFn fn;
  std::string_view kiln = {};  ///< Kiln op or variant, for functions shared by several aten ops
};

/// The rule for `aten` (exact name), or nullptr.
const AtenRule* findAtenRule(std::string_view aten);
/// Every aten op with a rule, sorted.
std::vector<std::string> atenRuleNames();

// Family tables (aten_lowering_*.cpp).
std::span<const AtenRule> elementwiseRules();
std::span<const AtenRule> shapeRules();
std::span<const AtenRule> factoryRules();
std::span<const AtenRule> nnRules();
std::span<const AtenRule> reductionRules();
std::span<const AtenRule> lossRules();
std::span<const AtenRule> resampleRules();
std::span<const AtenRule> rnnRules();

/// Shorthand for rules returning a single tensor.
inline std::vector<SV> single(Lowering& cx, Value* v) {
  return {cx.fresh(v)};
}

/// Normalize a possibly negative dim against `rank`, failing with a clear message.
int64_t normDim(int64_t dim, int64_t rank);

}  // namespace kiln::ts
