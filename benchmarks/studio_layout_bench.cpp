// How long kiln-studio's graph view takes to lay out a step, folded as it
// opens it and with more and more scopes opened (what double-clicks do), up
// to a budget: the Graphviz layout runs off the GUI thread, so this is the
// wait before the drawing changes, not a freeze.
//   kiln_studio_layout_bench REPORT.json [--budget SECONDS]
// REPORT is any kiln compile/train --report (its graph.ir is laid out). The
// first row is what opening it costs: reading the report and parsing its
// graph, choosing the folding, and the folded graph's layout. A LLaMA-7B-
// shape step, compiled from shapes alone (docs/benchmarks.md):
//   python3 models/export.py llama_7b_shape --format fx --shapes-only --out-dir D
//   kiln compile D/llama_7b_shape.fx.json --report D/r.json
//   kiln_studio_layout_bench D/r.json --budget 3
#include <QElapsedTimer>
#include <QGuiApplication>
#include <cstdio>
#include <string>

#include "core/graphviz/render.h"
#include "driver/scope_folding.h"
#include "gui/studio_document.h"
#include "gui/views/graph_canvas.h"

using namespace kiln;
using namespace kiln::studio;

int main(int argc, char** argv) {
  QGuiApplication app(argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s REPORT.json [--budget SECONDS]\n", argv[0]);
    return 2;
  }
  double budget = argc > 3 && std::string(argv[2]) == "--budget" ? std::stod(argv[3]) : 60;
  QElapsedTimer opening;
  opening.start();
  auto doc = StudioDocument::open(argv[1]);  // read the JSON, parse graph.ir back
  if (!doc || !(*doc)->graph()) {
    std::fprintf(stderr, "%s: %s\n", argv[1], doc ? "the report has no graph.ir" : doc.error().message.c_str());
    return 1;
  }
  const Graph& g = *(*doc)->graph();
  std::vector<const Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  const double open_ms = double(opening.nsecsElapsed()) / 1e6;
  QElapsedTimer folding;
  folding.start();
  std::set<std::string> open = driver::defaultOpenScopes(g, GraphCanvas::kMaxItems);
  const std::set<std::string> all = driver::allScopes(g);
  const double fold_ms = double(folding.nsecsElapsed()) / 1e6;
  std::printf("%zu nodes, %zu scopes; report read and graph parsed in %.1f ms, folding chosen in %.1f ms\n",
              g.numNodes(), all.size(), open_ms, fold_ms);
  std::printf("layout (dot) of the folded graph as scopes open:\n");
  std::printf("%8s %8s %10s %8s\n", "boxes", "open", "layout ms", "placed");
  // Open the remaining scopes in order, a few at a time, timing each layout.
  std::vector<std::string> closed;
  for (const std::string& s : all)
    if (!open.count(s)) closed.push_back(s);
  size_t next = 0;
  while (true) {
    const driver::FoldedGraph f = driver::foldGraph(g, open);
    QElapsedTimer t;
    t.start();
    auto plain = renderDot(foldedDot(f, nodes), "plain");
    const double ms = double(t.nsecsElapsed()) / 1e6;
    if (!plain) {
      std::fprintf(stderr, "layout failed: %s\n", plain.error().message.c_str());
      return 1;
    }
    const GraphLayout laid = parsePlainLayout(*plain);  // what the canvas would draw
    std::printf("%8zu %8zu %10.1f %8zu\n", f.items.size(), open.size(), ms, laid.boxes.size());
    std::fflush(stdout);
    if (next >= closed.size() || ms > budget * 1000) break;
    for (size_t k = 0; k < std::max<size_t>(1, closed.size() / 8) && next < closed.size(); ++k)
      open.insert(closed[next++]);
  }
  return 0;
}
