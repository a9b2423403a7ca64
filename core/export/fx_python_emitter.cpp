// The emitter behind `kiln export --format fx` (fx_python_ops.h): Python
// literals, the value -> variable map, one `_c(...)` line per aten call, and
// the dispatch of a node to its family's EmitFn. Fused nodes' bodies are
// emitted here too, inline, through the same tables, so a fused chain
// becomes the aten ops it was fused from.
#include <cmath>

#include "core/attribute.h"
#include "core/export/fx_python_ops.h"
#include "core/op_table.h"
#include "core/text_ir.h"

namespace kiln::fx {

std::string pyInt(int64_t v) {
  return std::to_string(v);
}

std::string pyFloat(double v) {
  if (std::isnan(v)) return "float('nan')";
  if (std::isinf(v)) return v > 0 ? "float('inf')" : "float('-inf')";
  return formatDouble(v);  // shortest text that reads back as v; always has '.' or an exponent
}

std::string pyBool(bool v) {
  return v ? "True" : "False";
}

std::string pyStr(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string pyInts(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string pyDType(DType t) {
  switch (t) {
    case DType::F32:
      return "torch.float32";
    case DType::F64:
      return "torch.float64";
    case DType::F16:
      return "torch.float16";
    case DType::BF16:
      return "torch.bfloat16";
    case DType::I64:
      return "torch.int64";
    case DType::I32:
      return "torch.int32";
    case DType::I16:
      return "torch.int16";
    case DType::I8:
      return "torch.int8";
    case DType::U8:
      return "torch.uint8";
    case DType::Bool:
      return "torch.bool";
  }
  return "None";
}

std::string pyScalar(double v, DType t) {
  if (t == DType::Bool) return pyBool(v != 0);
  if (isIntegral(t)) {
    // A cast truncates; out-of-range values have no meaning in Kiln either.
    if (!std::isfinite(v)) fail("integer constant " + formatDouble(v) + " is not finite");
    return pyInt(static_cast<int64_t>(v));
  }
  return pyFloat(v);
}

void refuse(const Node& n, const std::string& msg) {
  fail(n.describe() + ": " + msg);
}

// ---- Emitter ----------------------------------------------------------------------

namespace {
/// prefix + counter, counting up. (Built by append: GCC 12 warns, falsely,
/// about `"v" + std::to_string(i)`.)
std::string newName(char prefix, int64_t& counter) {
  std::string s(1, prefix);
  s.append(std::to_string(counter++));
  return s;
}
}  // namespace

Emitter::Emitter() {
  addElementwiseEmitters(table_);
  addShapeEmitters(table_);
  addNNEmitters(table_);
  addReduceLossEmitters(table_);
  addOptimizerEmitters(table_);
  addAttentionEmitters(table_);
}

const std::string& Emitter::ref(const Value* v) const {
  auto it = names_.find(v);
  if (it == names_.end()) fail("fx export: value %" + std::to_string(v->id()) + " used before it was emitted");
  return it->second;
}

void Emitter::bind(const Value* v, std::string var) {
  names_[v] = std::move(var);
}

std::string Emitter::call(std::string_view target, const std::vector<std::string>& args,
                          const std::vector<std::string>& kwargs) {
  std::string var = newName('v', next_);
  out_ << "    " << var << " = _c(" << target;
  for (const std::string& a : args) out_ << ", " << a;
  for (const std::string& k : kwargs) out_ << ", " << k;
  out_ << ")\n";
  ++calls_;
  return var;
}

std::string Emitter::item(const std::string& tuple, int64_t i) {
  return call("operator.getitem", {tuple, pyInt(i)});
}

std::string Emitter::intsConst(const std::vector<int64_t>& values) {
  std::string var = newName('k', consts_);
  out_ << "    " << var << " = _const(" << pyStr(var) << ", " << pyInts(values) << ")\n";
  return var;
}

std::string Emitter::cast(const std::string& x, DType from, DType to) {
  if (from == to) return x;
  return call("aten._to_copy.default", {x}, {"dtype=" + pyDType(to)});
}

void Emitter::comment(std::string_view text) {
  std::string line(text);
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  out_ << "    # " << line << "\n";
}

void Emitter::emit(const Node& n) {
  if (n.def().has(kCollective)) refuse(n, "a collective; export a single-process step");
  auto it = table_.find(n.op());
  if (it == table_.end()) refuse(n, "op '" + n.op() + "' has no torch.fx mapping in kiln export --format fx");
  it->second(*this, n);
  for (const Value* v : n.outputs())
    if (!names_.count(v))
      fail("fx export: " + n.describe() + " left output " + std::to_string(v->outputIndex()) + " unbound");
}

std::vector<std::string> Emitter::emitBody(const Node& fused, const std::vector<std::string>& operands,
                                           std::vector<TensorType>* types) {
  const Graph* body = &fused.subgraph("body");
  if (body->inputs().size() != operands.size())
    refuse(fused, "body takes " + std::to_string(body->inputs().size()) + " operands, the node has " +
                      std::to_string(operands.size()));
  for (size_t i = 0; i < operands.size(); ++i) bind(body->inputs()[i], operands[i]);
  for (const auto& b : body->nodes()) emit(*b);
  std::vector<std::string> outs;
  for (const GraphOutput& o : body->outputs()) {
    outs.push_back(ref(o.value));
    if (types) types->push_back(o.value->type());
  }
  // The body dies here: forget its values so no later lookup can hit a reused address.
  for (const Value* v : body->inputs()) unbind(v);
  for (const auto& b : body->nodes())
    for (const Value* v : b->outputs()) unbind(v);
  return outs;
}

// ---- shared helpers -----------------------------------------------------------------

std::string emitSumOrMean(Emitter& e, bool mean, const std::string& x, const std::vector<int64_t>& axes, bool keepdim) {
  return e.call(mean ? "aten.mean.dim" : "aten.sum.dim_IntList", {x, pyInts(axes), pyBool(keepdim)});
}

}  // namespace kiln::fx
