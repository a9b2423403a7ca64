// Private to core/export/fx_python*.cpp: the emitter that writes the body
// of the generated build() function, and the per-family tables that map
// each Kiln op to aten calls.
//
// Every Kiln value lives in a Python variable of build() holding an fx.Node;
// a family's EmitFn reads its inputs' variables (Emitter::in), appends
// `vN = _c(aten.op.overload, args..., kw=...)` lines (Emitter::call), one
// torch.fx call_function node each, and binds the node's outputs to the
// variables that hold them (Emitter::setOut). Ops PyTorch has no single aten
// op for (the optimizer updates, loss gradients) become short sequences of
// such calls that follow Kiln's CPU kernels operation by operation. An op
// that cannot be mapped throws KilnException naming the node.
#pragma once

#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ir.h"

namespace kiln::fx {

// ---- Python literals ------------------------------------------------------------

std::string pyInt(int64_t v);
/// A float literal that reads back as exactly `v` (float('inf') and friends too).
std::string pyFloat(double v);
std::string pyBool(bool v);
std::string pyStr(std::string_view s);
std::string pyInts(const std::vector<int64_t>& v);
/// torch.float32, torch.int64, ...
std::string pyDType(DType t);
/// `v` as a Python scalar of dtype `t`'s kind: a bool, an int (truncated, as
/// a cast does) or a float.
std::string pyScalar(double v, DType t);

/// Throws KilnException "<node>: <msg>".
[[noreturn]] void refuse(const Node& n, const std::string& msg);

// ---- the emitter ----------------------------------------------------------------

class Emitter;
using EmitFn = void (*)(Emitter&, const Node&);
using EmitTable = std::map<std::string, EmitFn, std::less<>>;

class Emitter {
 public:
  Emitter();

  /// The Python variable of a value (throws if it was never bound: a bug).
  const std::string& ref(const Value* v) const;
  void bind(const Value* v, std::string var);
  void unbind(const Value* v) { names_.erase(v); }
  /// Shorthands for a node's input i and output i.
  const std::string& in(const Node& n, size_t i) const { return ref(n.input(i)); }
  void setOut(const Node& n, size_t i, std::string var) { bind(n.output(i), std::move(var)); }

  /// `vN = _c(target, args..., kwargs...)`: one call_function node. `target`
  /// is written as given ("aten.add.Tensor", "operator.getitem"); kwargs are
  /// "name=value" strings. Returns the new variable.
  std::string call(std::string_view target, const std::vector<std::string>& args,
                   const std::vector<std::string>& kwargs = {});
  /// Element i of a node that returns a tuple.
  std::string item(const std::string& tuple, int64_t i);
  /// An int64 index tensor held as a buffer of the module (a get_attr node).
  std::string intsConst(const std::vector<int64_t>& values);
  /// x converted to dtype t (x itself when it already has that dtype).
  std::string cast(const std::string& x, DType from, DType to);
  /// A comment line in the generated code.
  void comment(std::string_view text);

  /// Emit one node through the op tables (throws naming the node or op).
  void emit(const Node& n);
  /// Emit a fused node's body inline on `operands`; returns its outputs'
  /// variables (and, with `types`, their types).
  std::vector<std::string> emitBody(const Node& fused, const std::vector<std::string>& operands,
                                    std::vector<TensorType>* types = nullptr);

  /// The generated statements, indented for build()'s body.
  std::string code() const { return out_.str(); }
  /// Number of call_function nodes written (aten ops and getitems).
  int64_t calls() const { return calls_; }

 private:
  std::ostringstream out_;
  std::unordered_map<const Value*, std::string> names_;
  EmitTable table_;
  int64_t next_ = 0, consts_ = 0, calls_ = 0;
};

// ---- op families (one file each) ------------------------------------------------

void addElementwiseEmitters(EmitTable& t);  // fx_python_elementwise.cpp
void addShapeEmitters(EmitTable& t);        // fx_python_shape.cpp
void addNNEmitters(EmitTable& t);           // fx_python_nn.cpp
void addReduceLossEmitters(EmitTable& t);   // fx_python_reduce.cpp
void addOptimizerEmitters(EmitTable& t);    // fx_python_optim.cpp
void addAttentionEmitters(EmitTable& t);    // fx_python_attention.cpp

/// Shared by families: a sum or mean over explicit axes (Kiln's reductionAxes
/// of a `dims` attribute: never aten's "empty means all").
std::string emitSumOrMean(Emitter& e, bool mean, const std::string& x, const std::vector<int64_t>& axes, bool keepdim);

}  // namespace kiln::fx
