// How long kiln-studio's graph view takes to lay out a step, folded as it
// opens it and with more and more scopes opened (what double-clicks do), up
// to a budget: the Graphviz layout runs off the GUI thread, so this is the
// wait before the drawing changes, not a freeze.
//   kiln_studio_layout_bench REPORT.json [--budget SECONDS]
// REPORT is any kiln compile/train --report (its graph.ir is laid out).
#include <QElapsedTimer>
#include <QGuiApplication>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/graphviz/render.h"
#include "gui/scope_folding.h"
#include "gui/studio_document.h"
#include "gui/views/graph_canvas.h"

using namespace kiln;
using namespace kiln::studio;

namespace {

/// The DOT kiln-studio lays out for `open` (the canvas's own builder is
/// private; this one has the same shape: one box per item, edges once).
std::string dotOf(const FoldedGraph& f) {
  std::string dot =
      "digraph g {\n  rankdir=TB;\n  nslimit=2;\n  nslimit1=2;\n  mclimit=0.1;\n"
      "  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  if (const char* extra = std::getenv("KILN_DOT_ATTRS")) dot += std::string("  ") + extra + "\n";
  for (size_t i = 0; i < f.items.size(); ++i)
    dot += "  i" + std::to_string(i) + " [label=\"" + f.items[i].scope + "\"];\n";
  for (const auto& [a, b] : f.edges) dot += "  i" + std::to_string(a) + " -> i" + std::to_string(b) + ";\n";
  return dot + "}\n";
}

}  // namespace

int main(int argc, char** argv) {
  QGuiApplication app(argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s REPORT.json [--budget SECONDS]\n", argv[0]);
    return 2;
  }
  double budget = argc > 3 && std::string(argv[2]) == "--budget" ? std::stod(argv[3]) : 60;
  auto doc = StudioDocument::open(argv[1]);
  if (!doc || !(*doc)->graph()) {
    std::fprintf(stderr, "%s: %s\n", argv[1], doc ? "the report has no graph.ir" : doc.error().message.c_str());
    return 1;
  }
  const Graph& g = *(*doc)->graph();
  std::set<std::string> open = defaultOpenScopes(g, GraphCanvas::kMaxItems);
  const std::set<std::string> all = allScopes(g);
  std::printf("%zu nodes, %zu scopes; layout (dot) of the folded graph as scopes open:\n", g.numNodes(), all.size());
  std::printf("%8s %8s %10s\n", "boxes", "open", "layout ms");
  // Open the remaining scopes in order, a few at a time, timing each layout.
  std::vector<std::string> closed;
  for (const std::string& s : all)
    if (!open.count(s)) closed.push_back(s);
  size_t next = 0;
  while (true) {
    const FoldedGraph f = foldGraph(g, open);
    QElapsedTimer t;
    t.start();
    auto plain = renderDot(dotOf(f), "plain");
    const double ms = double(t.nsecsElapsed()) / 1e6;
    if (!plain) {
      std::fprintf(stderr, "layout failed: %s\n", plain.error().message.c_str());
      return 1;
    }
    std::printf("%8zu %8zu %10.1f\n", f.items.size(), open.size(), ms);
    std::fflush(stdout);
    if (next >= closed.size() || ms > budget * 1000) break;
    for (size_t k = 0; k < std::max<size_t>(1, closed.size() / 8) && next < closed.size(); ++k)
      open.insert(closed[next++]);
  }
  return 0;
}
