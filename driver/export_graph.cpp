#include "driver/export_graph.h"

#include "core/export/fx_python.h"
#include "core/file_io.h"
#include "core/graph_dot.h"
#include "core/graph_json.h"
#include "core/graphviz/render.h"
#include "core/text_ir.h"

namespace kiln::driver {
namespace {

bool hasConstInputs(const Graph& g) {
  for (const Value* v : g.inputs())
    if (v->role() == ValueRole::Const) return true;
  return false;
}

}  // namespace

Result<std::string> formatGraph(const Graph& g, const std::string& format, const TensorMap& consts) {
  if (format == "json") return graphToJsonText(g);
  if (format == "text") return printGraph(g);
  if (format == "dot") return graphToDot(g);
  if (format == "fx") return graphToFxPython(g, consts);
  if (format == "svg") return renderDot(graphToDot(g), "svg");
  return Error{"unknown export format '" + format + "'; use json, text, dot, svg or fx"};
}

Status exportStepGraph(const Graph& g, const ModelArgs& model, const std::string& format, const std::string& path) {
  TensorMap consts;
  if (format == "fx" && hasConstInputs(g)) {
    auto m = loadAndVerify(model);
    if (!m) return m.error();
    consts = std::move(m->weights);
  }
  auto text = formatGraph(g, format, consts);
  if (!text) return text.error();
  return writeFileAtomic(path, *text);
}

}  // namespace kiln::driver
