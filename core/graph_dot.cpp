#include "core/graph_dot.h"

#include <map>
#include <unordered_map>

namespace kiln {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string topScope(const std::string& scope) {
  return scope.substr(0, scope.find('.'));
}

}  // namespace

std::string graphToDot(const Graph& g, bool inputs_and_outputs) {
  std::unordered_map<const Value*, std::string> src;  // value -> dot node id
  // nslimit/nslimit1/mclimit: a near-optimal ranking and fewer crossing
  // passes, so Graphviz lays out a step of a thousand nodes in seconds, not
  // tens of minutes (the same as kiln-studio's, gui/views/graph_canvas.cpp).
  std::string out = "digraph \"";
  out += escape(g.name);
  out +=
      "\" {\n  rankdir=TB;\n  nslimit=2;\n  nslimit1=2;\n  mclimit=0.1;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (const Value* v : g.inputs()) {
    std::string id = "in" + std::to_string(v->id());
    src[v] = id;
    if (inputs_and_outputs)
      out += "  " + id + " [shape=ellipse, label=\"" + escape(v->name()) + "\\n" + v->type().str() + " " +
             std::string(roleName(v->role())) + "\"];\n";
  }
  std::map<std::string, std::vector<std::string>> clusters;
  int k = 0;
  for (const auto& n : g.nodes()) {
    std::string id = "n";  // (not "n" + to_string: GCC 12 warns falsely, -Wrestrict)
    id += std::to_string(k++);
    std::string label = n->op();
    for (const Value* o : n->outputs()) label += "\\n" + o->type().str();
    std::string line = id + " [label=\"" + escape(label) + "\"" +
                       (n->scope().empty() ? "" : ", tooltip=\"" + escape(n->scope()) + "\"") + "];";
    clusters[topScope(n->scope())].push_back(line);
    for (const Value* o : n->outputs()) src[o] = id;
    for (const Value* in : n->inputs())
      if (inputs_and_outputs || in->producer()) out += "  " + src.at(in) + " -> " + id + ";\n";
  }
  int c = 0;
  for (const auto& [scope, lines] : clusters) {
    bool boxed = !scope.empty();
    if (boxed) out += "  subgraph cluster_" + std::to_string(c++) + " {\n    label=\"" + escape(scope) + "\";\n";
    for (const auto& l : lines) out += (boxed ? "    " : "  ") + l + "\n";
    if (boxed) out += "  }\n";
  }
  for (size_t i = 0; inputs_and_outputs && i < g.outputs().size(); ++i) {
    const GraphOutput& o = g.outputs()[i];
    std::string id = "out" + std::to_string(i);
    out += "  " + id + " [shape=ellipse, label=\"" + escape(o.name) + "\\n" + std::string(outputRoleName(o.role)) +
           "\"];\n  " + src.at(o.value) + " -> " + id + ";\n";
  }
  return out + "}\n";
}

}  // namespace kiln
