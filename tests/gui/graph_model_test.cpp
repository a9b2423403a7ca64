// kiln-studio's graph models, without a window: scope folding (every node in
// exactly one box, folded parts ordered forward then backward, default
// folding within its budget, opening and closing scopes) on a generated
// 12-layer graph of about a thousand nodes, drawn by the GraphCanvas off the
// GUI thread; the pass diff (nodes matched by value numbers, data flow and
// provenance) and the unified text diff.
#include <QtTest/QtTest>
#include <set>

#include "core/text_ir.h"
#include "driver/graph_diff.h"
#include "driver/scope_folding.h"
#include "gui/views/graph_canvas.h"

using namespace kiln;
using namespace kiln::studio;

namespace {

/// `layers` blocks of `per_layer` chained nodes each in scopes
/// layer.N.{a,b}, a backward chain through them in reverse ("grad of"
/// provenance), and an unscoped head.
Graph layeredGraph(int layers, int per_layer) {
  std::string ir = "graph g(%x: f32[4] data) {\n";
  int v = 0;
  std::string last = "%x";
  std::vector<std::string> saved;
  for (int l = 0; l < layers; ++l)
    for (int k = 0; k < per_layer; ++k) {
      const std::string scope = "layer." + std::to_string(l) + (k < per_layer / 2 ? ".a" : ".b");
      ir += "  %" + std::to_string(v) + " = relu(" + last + ") : f32[4] @" + scope + "\n";
      last = "%" + std::to_string(v++);
      saved.push_back(last);
    }
  ir += "  %" + std::to_string(v) + " = neg(" + last + ") : f32[4] loc(\"head\")\n";
  last = "%" + std::to_string(v++);
  for (int l = layers; l-- > 0;)
    for (int k = per_layer; k-- > 0;) {
      const std::string scope = "layer." + std::to_string(l) + (k < per_layer / 2 ? ".a" : ".b");
      ir += "  %" + std::to_string(v) + " = mul(" + last + ", " + saved[size_t(l * per_layer + k)] + ") : f32[4] @" +
            scope + " loc(\"grad of relu @" + scope + "\")\n";
      last = "%" + std::to_string(v++);
    }
  ir += "  return " + last + " \"output0\"\n}\n";
  auto g = parseGraph(ir, "layered");
  if (!g) qFatal("%s", g.error().message.c_str());
  return std::move(*g);
}

}  // namespace

class GraphModelTest : public QObject {
  Q_OBJECT

 private slots:
  void foldingPutsEveryNodeInOneBoxWithinTheBudget() {
    const Graph g = layeredGraph(12, 40);  // 961 nodes
    const std::set<std::string> open = driver::defaultOpenScopes(g, 60);
    const driver::FoldedGraph f = driver::foldGraph(g, open);
    QVERIFY2(f.items.size() <= 60, qPrintable(QString::number(f.items.size())));
    QVERIFY(f.items.size() >= 24);  // at least a forward and a backward box per layer
    QCOMPARE(f.item_of_node.size(), g.numNodes());
    std::vector<int> members(f.items.size(), 0);
    for (int item : f.item_of_node) {
      QVERIFY(item >= 0 && item < int(f.items.size()));
      ++members[size_t(item)];
    }
    for (size_t i = 0; i < f.items.size(); ++i) QCOMPARE(members[i], f.items[i].members);
    // Forward boxes never read backward ones: the folded graph keeps the step's order.
    for (const auto& [from, to] : f.edges) {
      QVERIFY(from != to);
      QVERIFY2(!(f.items[size_t(from)].backward && !f.items[size_t(to)].backward), "a backward -> forward edge");
    }
    // Each layer's folded scopes come in a forward and a backward box, labelled so.
    int parts = 0;
    for (const auto& it : f.items) parts += it.node < 0 && it.scope.rfind("layer.3", 0) == 0 && it.split;
    QVERIFY(parts >= 2 && parts % 2 == 0);
    // Everything open: every node alone.
    QCOMPARE(driver::foldGraph(g, driver::allScopes(g)).items.size(), g.numNodes());
    // A small graph is not folded.
    const Graph small = layeredGraph(2, 4);
    QCOMPARE(driver::foldGraph(small, driver::defaultOpenScopes(small, 60)).items.size(), small.numNodes());
  }

  void canvasFoldsALargeGraphAndOpensScopes() {
    const Graph g = layeredGraph(12, 40);
    GraphCanvas canvas;
    canvas.resize(1000, 800);
    canvas.show();
    QElapsedTimer t;
    t.start();
    canvas.setGraph(&g);
    canvas.waitForLayout();
    qInfo("%zu nodes laid out as %zu boxes in %lld ms", g.numNodes(), canvas.drawnItems(), t.elapsed());
    QVERIFY(canvas.drawnItems() <= GraphCanvas::kMaxItems);
    QVERIFY(canvas.drawnNodes() < canvas.drawnItems());  // mostly folded scopes
    QVERIFY2(canvas.status().contains("folded"), qPrintable(canvas.status()));
    // Opening a folded scope draws more boxes; closing it folds them back.
    std::string folded;
    for (const auto& it : canvas.folded().items)
      if (it.node < 0) folded = it.scope;
    QVERIFY(!folded.empty());
    const size_t before = canvas.drawnItems();
    canvas.openScope(folded);
    canvas.waitForLayout();
    QVERIFY(canvas.drawnItems() > before);
    canvas.closeScope(folded);
    canvas.waitForLayout();
    QCOMPARE(canvas.drawnItems(), before);
    // Selecting a node inside a folded scope with reveal opens it and selects it.
    const int node = int(g.numNodes()) / 3;
    canvas.select(node, /*reveal=*/true);
    canvas.waitForLayout();
    QCOMPARE(canvas.selectedNode(), node);
    QVERIFY(canvas.folded().items[size_t(canvas.folded().item_of_node[size_t(node)])].node == node);
  }

  void diffMatchesNodesAcrossAPass() {
    // dce-like removal, and a rewrite: %3 = relu(%2) becomes %9 = fused(...)
    // which %4 now reads; %5 keeps its number but takes new attributes.
    const char* before = R"IR(graph g(%x: f32[4] data) {
  %1 = neg(%x) : f32[4] @a loc("m.py:1")
  %2 = exp(%1) : f32[4] @b loc("m.py:2")
  %3 = relu(%2) : f32[4] @b loc("m.py:3")
  %4 = mul(%3, %1) : f32[4] @c
  %5 = leaky_relu(%4) {negative_slope=0.1} : f32[4] @c
  %6 = abs(%x) : f32[4] @dead
  return %5 "output0"
}
)IR";
    const char* after = R"IR(graph g(%x: f32[4] data) {
  %1 = neg(%x) : f32[4] @a loc("m.py:1")
  %9 = sigmoid(%1) : f32[4] @b loc("fuse(2 nodes from exp @b (m.py:2))")
  %4 = mul(%9, %1) : f32[4] @c
  %5 = leaky_relu(%4) {negative_slope=0.2} : f32[4] @c
  return %5 "output0"
}
)IR";
    auto b = driver::parsePassGraph(before, "before");
    auto a = driver::parsePassGraph(after, "after");
    QVERIFY2(b.ok() && a.ok(), "parse");
    QCOMPARE(b->keys, (std::vector<std::string>{"%1", "%2", "%3", "%4", "%5", "%6"}));
    const driver::GraphDiff d = driver::diffPassGraphs(*b, *a);
    QCOMPARE(d.removed, 3);  // %2, %3, %6
    QCOMPARE(d.added, 1);    // %9
    QCOMPARE(d.changed, 2);  // %4 reads %9 now, %5's slope
    QVERIFY(d.before[0] == driver::NodeChange::Same);
    QVERIFY(d.before[5] == driver::NodeChange::Removed && d.after_of_before[5].empty());  // dead: nothing replaced it
    // %9 replaced %3 (data flow: %4 read %3, now reads %9) and %2 (provenance).
    QCOMPARE(std::set<int>(d.before_of_after[1].begin(), d.before_of_after[1].end()), (std::set<int>{1, 2}));
    QCOMPARE(d.after_of_before[3], (std::vector<int>{2}));  // %4 is itself
    // A graph whose node lines do not match its nodes is an error, not a crash.
    QVERIFY(!driver::parsePassGraph("not ir", "junk").ok());
  }

  void unifiedDiffShowsHunksWithContext() {
    std::string a, b;
    for (int i = 0; i < 40; ++i) {
      a += "line " + std::to_string(i) + "\n";
      if (i != 10 && i != 30) b += "line " + std::to_string(i) + "\n";
      if (i == 30) b += "changed 30\n";
    }
    const std::string d = driver::unifiedDiff(a, b, 2);
    QCOMPARE(QString::fromStdString(d), QString("@@ -9,5 +9,4 @@\n line 8\n line 9\n-line 10\n line 11\n line 12\n"
                                                "@@ -29,5 +28,5 @@\n line 28\n line 29\n-line 30\n+changed 30\n"
                                                " line 31\n line 32\n"));
    QVERIFY(driver::unifiedDiff(a, a).empty());
    QCOMPARE(QString::fromStdString(driver::unifiedDiff("", "x\n")), QString("@@ -1,0 +1,1 @@\n+x\n"));
  }
};

QTEST_MAIN(GraphModelTest)
#include "graph_model_test.moc"
