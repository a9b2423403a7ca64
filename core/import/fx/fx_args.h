// The arguments of one FX node, normalized against its op schema: positional
// args, kwargs and schema defaults become one list in schema order, so every
// lowering rule reads arguments by name ("stride", "approximate") whatever the
// dumper wrote positionally. Typed accessors decode the literal encoding and
// fail with "argument 'stride': expected an int list, got string".
// Also PyTorch's result-dtype rule for mixed tensor / number operands.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/import/fx/fx_document.h"
#include "core/ir.h"

namespace kiln::fx {

class Lowering;

/// Bound on ordinary integer arguments (axes, groups, counts): far from
/// overflow in any arithmetic Kiln does with them.
constexpr int64_t kMaxInt = int64_t{1} << 40;
/// Bound on window arguments (kernel, stride, padding, dilation, pads).
constexpr int64_t kMaxWindow = int64_t{1} << 20;

/// A Python number argument, with the kind that decides dtype promotion.
struct Number {
  FxArg::Kind kind = FxArg::Kind::Int;  ///< Bool, Int or Float
  double value = 0;
  int64_t ivalue = 0;  ///< exact value for Bool/Int
  bool isFloat() const { return kind == FxArg::Kind::Float; }
};

/// A tensor or a number: operands of arithmetic ops, where schemas typed
/// `Tensor` may still hold a plain number (a "wrapped number").
struct Operand {
  Value* tensor = nullptr;
  Number number;
  bool isNumber() const { return tensor == nullptr; }
};

/// PyTorch's result dtype (c10::ResultTypeState): dimensioned tensors win
/// over 0-d tensors, which win over numbers, unless a lower tier holds a
/// higher category (bool < integer < float). A float number is the default
/// dtype f32; an int number i64.
DType resultType(std::span<const Operand> operands);

/// Arguments of one node matched against its schema.
class NodeArgs {
 public:
  /// Throws when positional args overflow the schema, a kwarg is unknown or
  /// given twice, or an argument without default is missing.
  NodeArgs(Lowering& cx, const FxNode& node, const FxSchema& schema, std::string_view kiln);

  /// The Kiln op named by the rule table entry (shared rules read it).
  std::string_view kiln;
  const FxNode& node() const { return node_; }

  /// The argument (fails when the schema has no argument of that name).
  const FxArg& arg(std::string_view name) const;
  bool has(std::string_view name) const;
  /// Present in the schema and not None.
  bool given(std::string_view name) const;

  Value* tensor(std::string_view name) const;
  Value* optTensor(std::string_view name) const;  ///< nullptr for None
  std::vector<Value*> tensors(std::string_view name) const;
  std::vector<Value*> optTensors(std::string_view name) const;  ///< None entries are nullptr
  Operand operand(std::string_view name) const;

  Number number(std::string_view name) const;
  double real(std::string_view name) const;
  std::optional<double> optReal(std::string_view name) const;
  /// An int within [-kMaxInt, kMaxInt] (a bool reads as 0/1).
  int64_t integer(std::string_view name) const;
  std::optional<int64_t> optInt(std::string_view name) const;
  /// Any int64 (slice bounds, where INT64_MAX means "to the end").
  std::optional<int64_t> optAnyInt(std::string_view name) const;
  bool flag(std::string_view name) const;
  std::optional<bool> optFlag(std::string_view name) const;
  std::string str(std::string_view name) const;
  std::optional<std::string> optStr(std::string_view name) const;
  /// An int list; a single int reads as a one-element list. Each |v| <= limit.
  std::vector<int64_t> ints(std::string_view name, int64_t limit = kMaxInt) const;
  std::optional<std::vector<int64_t>> optInts(std::string_view name, int64_t limit = kMaxInt) const;
  /// A shape: dims >= 0 or -1, product within kMaxElements. -1 may appear
  /// once (a view's inferred dim), or any number of times for `expand`.
  Shape sizes(std::string_view name, bool expand = false) const;
  std::optional<DType> optDType(std::string_view name) const;

  /// Throws "argument 'name': msg".
  [[noreturn]] void fail(std::string_view name, const std::string& msg) const;

 private:
  int64_t checkedInt(std::string_view name, const FxArg& a, int64_t limit) const;
  Lowering& cx_;
  const FxNode& node_;
  std::vector<std::pair<std::string_view, const FxArg*>> args_;
};

}  // namespace kiln::fx
