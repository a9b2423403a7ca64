// Printer half of the text IR (see text_ir.h for the grammar).
#include <unordered_map>

#include "core/op_table.h"
#include "core/text_ir.h"

namespace kiln {
namespace {

bool isPlainName(const std::string& s) {
  if (s.empty()) return false;
  bool all_digits = true;
  for (char c : s) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
    if (!ok) return false;
    if (!std::isdigit(static_cast<unsigned char>(c))) all_digits = false;
  }
  return !all_digits;
}

std::string quoted(const std::string& s) {
  return attrToString(Attr{s});
}


class Printer {
 public:
  explicit Printer(const PrintOptions& o) : opts_(o) {}

  std::string ref(const Value* v) {
    std::string r = "%";
    if (v->isGraphInput()) {
      r += isPlainName(v->name()) ? v->name() : quoted(v->name());
    } else if (opts_.value_ids) {
      r += std::to_string(v->id());
    } else {
      auto it = numbers_.find(v);
      if (it == numbers_.end()) it = numbers_.emplace(v, next_++).first;
      r += std::to_string(it->second);
    }
    return r;
  }

  std::string node(const Node& n) {
    std::string s;
    for (size_t i = 0; i < n.numOutputs(); ++i) s += (i ? ", " : "") + ref(n.output(i));
    if (n.numOutputs()) s += " = ";
    s += n.op() + "(";
    for (size_t i = 0; i < n.numInputs(); ++i) s += (i ? ", " : "") + ref(n.input(i));
    s += ")";
    if (!n.attrs().empty()) {
      s += " {";
      bool first = true;
      for (const auto& [k, v] : n.attrs()) {
        s += first ? "" : ", ";
        s += k;
        s += '=';
        s += attrToString(v);  // a region prints on one line: one line per node
        first = false;
      }
      s += "}";
    }
    s += " :";
    for (size_t i = 0; i < n.numOutputs(); ++i) s += (i ? ", " : " ") + n.output(i)->type().str();
    if (opts_.scopes && !n.scope().empty()) s += " @" + (isPlainName(n.scope()) ? n.scope() : quoted(n.scope()));
    if (opts_.provenance && !n.provenance().empty()) s += " loc(" + quoted(n.provenance()) + ")";
    return s;
  }

  std::string graph(const Graph& g) {
    std::string s = "graph " + (isPlainName(g.name) ? g.name : quoted(g.name)) + "(";
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const Value* v = g.inputs()[i];
      s += (i ? ", " : "") + ref(v) + ": " + v->type().str() + " " + std::string(roleName(v->role()));
    }
    const char* line = opts_.one_line ? " " : "\n  ";  // what starts each node line
    s += ") {";
    for (const auto& n : g.nodes()) {
      s += line;
      s += node(*n);
    }
    s += line;
    s += "return";
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const GraphOutput& o = g.outputs()[i];
      s += i ? ", " : " ";
      s += ref(o.value);
      s += ' ';
      s += quoted(o.name);
      if (o.role != OutputRole::Output) {
        s += ' ';
        s += outputRoleName(o.role);
      }
    }
    return s + (opts_.one_line ? " }" : "\n}\n");
  }

 private:
  PrintOptions opts_;
  std::unordered_map<const Value*, int> numbers_;
  int next_ = 0;
};

}  // namespace

std::string printGraph(const Graph& g, const PrintOptions& options) {
  return Printer(options).graph(g);
}

std::string printNode(const Node& n) {
  return Printer(PrintOptions{}).node(n);
}

}  // namespace kiln
