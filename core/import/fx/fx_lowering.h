// Lowering FX nodes (aten overloads) onto Kiln ops: the per-import state
// (FX name -> Kiln value, the scope and provenance stamped on every emitted
// node, in-place updates a rule reports) and the rule tables, one per op
// family (fx_lowering_*.cpp). A rule reads its arguments by schema name
// through NodeArgs and returns what the FX node produced.
#pragma once

#include <map>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/import/fx/fx_args.h"
#include "core/tensor.h"
#include "core/ir.h"

namespace kiln::fx {

/// What one FX node produced: a tensor, a tuple/list of FxValues, a number
/// known at import (a symbolic size of a PyTorch 2.x dump: an Int, Float or
/// Bool FxArg), or an output Kiln does not compute (then `unavailable` says
/// why, and any use of it fails with that reason).
struct FxValue {
  Value* tensor = nullptr;
  bool is_tuple = false;
  std::vector<FxValue> items;
  std::string unavailable;
  std::optional<FxArg> number;

  static FxValue of(Value* v) { return {v, false, {}, {}, {}}; }
  static FxValue tuple(std::vector<FxValue> items) { return {nullptr, true, std::move(items), {}, {}}; }
  static FxValue missing(std::string why) { return {nullptr, false, {}, std::move(why), {}}; }
  static FxValue known(FxArg n) { return {nullptr, false, {}, {}, std::move(n)}; }
};

/// State of one import.
class Lowering {
 public:
  explicit Lowering(Graph& graph) : graph_(graph) {}

  Graph& graph() { return graph_; }
  /// Stamped on every node emitted while lowering the current FX node.
  std::string scope, provenance;
  /// Set by rules of ops that update an argument in place (native_batch_norm
  /// in training): schema argument name -> the Kiln value holding the new
  /// contents. Cleared before each node.
  std::map<std::string, Value*, std::less<>> inplace;

  /// Emit a node / a single-output node with the current scope and provenance.
  Node* emitNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});
  Value* emit(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});

  /// A `full` of `shape` holding `value` as `dtype`.
  Value* full(double value, DType dtype, Shape shape = {});
  /// A 0-d constant (core/import/decompositions/common.h's name for it).
  Value* scalar(double value, DType dtype) { return full(value, dtype); }
  /// `v` cast to `dtype` (no node when it already is).
  Value* cast(Value* v, DType dtype);
  /// `v` reshaped (no node when the shape is unchanged). `shape` is explicit (no -1).
  Value* reshape(Value* v, Shape shape);
  /// `v` broadcast to `shape` (no node when unchanged).
  Value* expand(Value* v, Shape shape);
  /// `v` with dims reordered (no node for the identity permutation).
  Value* permute(Value* v, std::vector<int64_t> dims);
  /// An operand as a tensor of `dtype`: numbers become 0-d `full`, tensors are cast.
  Value* materialize(const Operand& o, DType dtype);

  /// A tensor known at import time (an upsampling index table) as a constant
  /// graph input "__const.kiln.N"; the importer adds `constants` to the weights.
  Value* constInput(const Tensor& t);
  TensorMap constants;
  /// The contents of a constant graph input (a lifted tensor constant, or
  /// one made by constInput()), or nullptr for any other value.
  const Tensor* knownValue(const Value* v) const;
  /// The contents of `v` when the importer can compute them: a known value,
  /// `full`, or reshape / expand / cast of a computable value (make_fx's int
  /// arguments arrive as such chains); nullopt for anything else.
  std::optional<Tensor> evaluate(const Value* v) const;
  /// The weights of the graph's inputs by name (set by the importer).
  const TensorMap* weights = nullptr;

  /// Record the value of an FX name.
  void define(const std::string& name, FxValue v);
  /// The value of an FX name (fails for names not defined yet).
  const FxValue& lookup(const std::string& name) const;
  bool defined(const std::string& name) const { return env_.count(name) != 0; }

  /// A 2-D value made by transposing another (t / transpose / permute [1,0]):
  /// lets addmm(b, x, t(W)) become linear(x, W, b).
  std::unordered_map<const Value*, Value*> transpose_of;

 private:
  Graph& graph_;
  std::unordered_map<std::string, FxValue> env_;
};

/// Normalize a possibly negative dim against `rank`, failing with a message
/// that names it (rank 0 accepts -1 and 0, as PyTorch does).
int64_t normDim(int64_t dim, int64_t rank);

/// Lower one FX node.
using LowerFn = FxValue (*)(Lowering& cx, NodeArgs& a);

/// One row of the aten -> Kiln table.
struct FxRule {
  std::string_view target;  ///< exact overload: "aten.add.Tensor"
  LowerFn fn;
  std::string_view kiln = {};  ///< Kiln op for rules shared by several overloads
};

/// The rule for an exact overload, or nullptr.
const FxRule* findFxRule(std::string_view target);
/// Every overload with a rule, sorted.
std::vector<std::string> fxRuleTargets();

// Family tables (fx_lowering_*.cpp).
std::span<const FxRule> elementwiseRules();
std::span<const FxRule> shapeRules();
std::span<const FxRule> factoryRules();
std::span<const FxRule> reductionRules();
std::span<const FxRule> linalgRules();
std::span<const FxRule> nnRules();
std::span<const FxRule> resampleRules();

// Symbolic sizes (fx_symbolic.cpp). A PyTorch 2.x dump with dynamic shapes
// reads sizes with aten.sym_size.int / sym_numel / sym_stride and computes
// with Python arithmetic on them (operator.mul, operator.floordiv, ...);
// Kiln's shapes are static, so each is a number known at import, and node
// references to such numbers are replaced by the numbers before a rule reads
// its arguments.
std::span<const FxRule> symbolicRules();
/// Python-level targets on numbers (operator.*, math.ceil, torch.sym_*), which have no schema.
bool isPythonArithmetic(std::string_view target);
std::vector<std::string> pythonArithmeticTargets();
FxValue lowerPythonArithmetic(const Lowering& cx, const FxNode& n);
/// `n` with every reference to a node that produced a known number replaced
/// by that number; nullopt when it has none.
std::optional<FxNode> withKnownNumbers(const Lowering& cx, const FxNode& n);

}  // namespace kiln::fx
