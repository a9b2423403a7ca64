// kiln-studio's widget tests (QTest, headless: QT_QPA_PLATFORM=offscreen).
// The reports come from the CTest fixture gui.reports (gui/CMakeLists.txt):
// `kiln compile --report` and `kiln train --nproc 2 --report` on gpt2_mini,
// named by KILN_STUDIO_COMPILE_REPORT and KILN_STUDIO_TRAIN_REPORT (and a
// compile under a memory budget, KILN_STUDIO_REMAT_REPORT, and a run with a
// recipe, KILN_STUDIO_RECIPE_REPORT), and the
// model itself (KILN_STUDIO_MODEL), which kiln-studio compiles in-process.
// Every view is opened and exported as PNG and SVG and checked to be a
// valid, non-blank file; the graph is laid out and searched; the passes view
// shows a pass before and after with its changes and keeps the two sides'
// selection in sync; bad files give one clear error; the window remembers
// its view.
#include <QDir>
#include <QImage>
#include <QJsonArray>
#include <QJsonObject>
#include <QJsonDocument>
#include <QSet>
#include <QSettings>
#include <QStandardPaths>
#include <QSvgRenderer>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "driver/compile.h"
#include "driver/messages.h"
#include "gui/main_window.h"
#include "gui/model_compiler.h"
#include "gui/views/chart_views.h"
#include "gui/views/compare_view.h"
#include "gui/views/graph_view.h"
#include "gui/views/passes_view.h"
#include "gui/views/roofline_view.h"
#include "gui/views/table_view.h"
#include "gui/views/timeline_view.h"
#include "gui/views/training_view.h"

namespace driver = kiln::driver;
using kiln::studio::GraphCanvas;
using kiln::studio::GraphView;
using kiln::studio::MainWindow;
using kiln::driver::NodeChange;
using kiln::studio::PassesView;
using kiln::studio::StudioDocument;

namespace {

QString env(const char* name) {
  const QString v = qEnvironmentVariable(name);
  if (v.isEmpty()) qFatal("%s is not set (run through ctest: the gui.reports fixture writes it)", name);
  return v;
}

/// Distinct colours in a sample of the image: a blank export has one.
int colours(const QImage& image) {
  QSet<QRgb> seen;
  for (int y = 0; y < image.height(); y += std::max(1, image.height() / 200))
    for (int x = 0; x < image.width(); x += std::max(1, image.width() / 200)) seen.insert(image.pixel(x, y));
  return int(seen.size());
}

}  // namespace

class StudioTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

  void everyViewOpensAndExports() {
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    QTemporaryDir dir;
    for (const char* name : {"graph", "passes", "memory", "kernels", "comm", "timeline", "roofline", "training"}) {
      QVERIFY(w.showView(name));
      QApplication::processEvents();
      const QString png = dir.filePath(QString(name) + ".png"), svg = dir.filePath(QString(name) + ".svg");
      QVERIFY2(w.exportCurrentView(png, &error), qPrintable(error));
      QVERIFY2(w.exportCurrentView(svg, &error), qPrintable(error));
      const QImage image(png);
      QVERIFY2(!image.isNull(), qPrintable(png + " is not a PNG"));
      QVERIFY2(colours(image) > 2, qPrintable(png + " is blank"));
      QSvgRenderer renderer(svg);
      QVERIFY2(renderer.isValid(), qPrintable(svg + " is not valid SVG"));
    }
    const QString shot = dir.filePath("shot.png");
    QVERIFY2(w.screenshotCurrentView(shot, &error), qPrintable(error));
    QVERIFY2(colours(QImage(shot)) > 2, "the screenshot is blank");
    QVERIFY(!w.exportCurrentView(dir.filePath("x.bmp"), &error));
    QVERIFY(error.contains(".png or .svg"));
  }

  void graphIsLaidOutAndSearchable() {
    MainWindow w;
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    GraphView* g = w.graphView();
    g->waitForLayout();
    const kiln::Graph* graph = w.document()->graph();
    QVERIFY(graph);
    // A box for every item: one per node up to kFoldAbove nodes (gpt2_mini's
    // step has about that many), folded by scope within kMaxItems above it
    // (the folding itself is tested on generated graphs in graph_model_test).
    const auto& folded = g->canvas()->folded();
    QCOMPARE(folded.item_of_node.size(), graph->numNodes());
    QCOMPARE(g->canvas()->drawnItems(), folded.items.size());
    if (graph->numNodes() > kiln::studio::GraphCanvas::kFoldAbove)
      QVERIFY(folded.items.size() <= kiln::studio::GraphCanvas::kMaxItems);
    else
      QCOMPARE(folded.items.size(), graph->numNodes());
    const int first = g->findNext("matmul");
    QVERIFY(first >= 0);
    const int second = g->findNext("matmul");
    QVERIFY(second >= 0 && second != first);
    // find opens the scope the match is folded in and draws it alone.
    g->waitForLayout();
    QCOMPARE(g->canvas()->selectedNode(), second);
    QCOMPARE(g->canvas()->folded().items[size_t(g->canvas()->folded().item_of_node[size_t(second)])].node, second);
    QCOMPARE(g->findNext("matmul", /*backwards=*/true), first);
    int k = 0;
    for (const auto& n : graph->nodes())
      if (k++ == second) QCOMPARE(QString::fromStdString(n->op()), QString("matmul"));
    QCOMPARE(g->findNext("no_such_op_anywhere"), -1);
    // Colouring by dialect: the legend names the dialects the kernels came from.
    g->colourByDialect(true);
    QVERIFY2(g->legend().contains("dialects:") && g->legend().contains("cpu"), qPrintable(g->legend()));
    g->colourByDialect(false);
    QVERIFY(!g->legend().contains("dialects:"));
  }

  void memoryClickSelectsTheNodeInTheGraph() {
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    w.graphView()->waitForLayout();
    QVERIFY(w.showView("memory"));
    auto* chart = static_cast<kiln::studio::MemoryView*>(w.view("memory"))->chart();
    QApplication::processEvents();
    const QPoint middle(chart->width() / 2, chart->height() / 2);
    const int node = chart->nodeAt(middle);
    QVERIFY(node > 0);
    QTest::mouseClick(chart, Qt::LeftButton, {}, middle);
    QCOMPARE(w.currentView()->name(), QString("graph"));
    QCOMPARE(w.graphView()->selectedNode(), node);
    QVERIFY(!chart->describeAt(middle).isEmpty());
  }

  // Metric overlays: every box's value is its nodes' measured time (a
  // folded scope's the sum), and the scale's top is the largest box.
  void graphViewColoursByAMetric() {
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    GraphView* gv = w.graphView();
    gv->waitForLayout();
    gv->colourBy(GraphView::Colouring::Time);
    QCOMPARE(gv->colouring(), GraphView::Colouring::Time);
    QVERIFY2(gv->legend().contains("measured time per step"), qPrintable(gv->legend()));
    const auto& kernels = w.document()->kernels();
    GraphCanvas* canvas = gv->canvas();
    auto check = [&](const char* what) {
      const auto& folded = canvas->folded();
      std::vector<double> expected(folded.items.size(), 0.0);
      for (size_t n = 0; n < folded.item_of_node.size(); ++n)
        expected[size_t(folded.item_of_node[n])] += kernels[n].measured_ms.value_or(0);
      double top = 0;
      for (size_t i = 0; i < expected.size(); ++i) {
        QVERIFY2(std::abs(canvas->itemValue(i) - expected[i]) <= 1e-12 * std::max(1.0, expected[i]), what);
        top = std::max(top, expected[i]);
      }
      QCOMPARE(canvas->maxItemValue(), top);
    };
    check("nodes drawn alone");
    // Fold a block: its box shows the sum of its nodes' times.
    canvas->closeScope("h.0");
    gv->waitForLayout();
    QVERIFY(canvas->folded().items.size() < kernels.size());
    check("h.0 folded");
    // The legend's top follows the boxes drawn.
    const QString top = QString::fromStdString(kiln::driver::formatQuantity(canvas->maxItemValue(), "ms"));
    QVERIFY2(gv->legend().contains(top), qPrintable(gv->legend() + " lacks " + top));
    // Memory at the node: the report's timeline; a folded scope its maximum.
    gv->colourBy(GraphView::Colouring::Memory);
    const auto& timeline = w.document()->report().memory.timeline;
    std::vector<double> most(canvas->folded().items.size(), 0.0);
    for (size_t n = 0; n < timeline.size(); ++n) {
      double& m = most[size_t(canvas->folded().item_of_node[n])];
      m = std::max(m, double(timeline[n]));
    }
    for (size_t i = 0; i < most.size(); ++i) QCOMPARE(canvas->itemValue(i), most[i]);
    gv->colourBy(GraphView::Colouring::OpKind);
    QCOMPARE(canvas->maxItemValue(), 0.0);
    // A compile report has no times, and the legend says how to get them.
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    gv->colourBy(GraphView::Colouring::Time);
    QVERIFY2(gv->legend().contains("no measured times"), qPrintable(gv->legend()));
    gv->colourBy(GraphView::Colouring::Flops);
    QVERIFY(canvas->maxItemValue() > 0);
  }

  // The memory view stacks the timeline by category: the categories add up
  // to the plan's timeline at every node, and the side table to the peak.
  void memoryViewStacksByCategory() {
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    QVERIFY(w.showView("memory"));
    auto* view = static_cast<kiln::studio::MemoryView*>(w.view("memory"));
    auto* chart = view->chart();
    QVERIFY(chart->hasCategories());
    QCOMPARE(chart->mode(), kiln::studio::MemoryChart::Mode::Categories);
    const auto& m = w.document()->report().memory;
    const auto& lines = chart->categoryTimelines();
    QCOMPARE(lines.size(), size_t(8));
    for (size_t i = 0; i < m.timeline.size(); ++i) {
      double sum = 0;
      for (const auto& line : lines) sum += line[i];
      QCOMPARE(sum, double(m.timeline[i]));
    }
    // A trained 2-rank step has parameters, optimizer state, activations
    // and communication buffers.
    const auto& names = chart->categoryNames();
    auto at_peak = [&](const QString& name) {
      const auto it = std::find(names.begin(), names.end(), name);
      return it == names.end() ? -1.0 : lines[size_t(it - names.begin())][size_t(m.peak_node)];
    };
    QVERIFY(at_peak("parameters") > 0);
    QVERIFY(at_peak("activations") > 0);
    QVERIFY(at_peak("communication") > 0 || at_peak("gradients") > 0);
    double table_sum = 0;
    QTableWidget* t = view->peakTable();
    QVERIFY(t->rowCount() >= 3);
    for (int r = 0; r < t->rowCount(); ++r) table_sum += t->item(r, 1)->data(Qt::UserRole).toDouble();
    QCOMPARE(table_sum, double(m.peak_bytes));
    QVERIFY2(chart->describeAt(QPoint(chart->width() / 2, chart->height() / 2)).contains("parameters"),
             qPrintable(chart->describeAt(QPoint(chart->width() / 2, chart->height() / 2))));
    view->showCategories(false);
    QCOMPARE(chart->mode(), kiln::studio::MemoryChart::Mode::Tensors);
    QVERIFY(w.exportCurrentView(QDir::temp().filePath("kiln-memory-categories.png"), &error));
  }

  void memoryViewMarksRecomputedValues() {
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_REMAT_REPORT"), &error), qPrintable(error));
    QVERIFY(w.showView("memory"));
    auto* chart = static_cast<kiln::studio::MemoryView*>(w.view("memory"))->chart();
    QApplication::processEvents();
    QVERIFY(chart->rematNodes() > 0);
    // Hovering a recomputing node says so.
    bool said = false;
    for (int x = 0; x < chart->width() && !said; ++x)
      said = chart->describeAt(QPoint(x, chart->height() / 2)).contains("remat");
    QVERIFY(said);
    // Without a budget nothing is marked.
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    QCOMPARE(chart->rematNodes(), size_t(0));
  }

  void cancelledLayoutDrawsNothing() {
    MainWindow w;
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    w.graphView()->cancelLayout();
    w.graphView()->waitForLayout();
    // Either the layout had finished already (drawn) or it was dropped.
    const auto* canvas = w.graphView()->canvas();
    QVERIFY(canvas->drawnItems() == 0 || canvas->drawnItems() == canvas->folded().items.size());
    QVERIFY(canvas->drawnItems() != 0 || w.graphView()->status() == "layout cancelled");
  }

  void openingAModelCompilesItInProcess() {
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_MODEL"), &error), qPrintable(error));
    auto doc = w.document();
    QVERIFY(doc && doc->graph());
    QCOMPARE(QString::fromStdString(doc->command()), QString("compile"));
    QVERIFY(doc->hasPassIr());
    // The same step kiln compile builds: the report's graph hash.
    QJsonDocument fixture;
    {
      QFile f(env("KILN_STUDIO_COMPILE_REPORT"));
      QVERIFY(f.open(QIODevice::ReadOnly));
      fixture = QJsonDocument::fromJson(f.readAll());
    }
    QCOMPARE(QString::fromStdString(doc->report().graph.hash), fixture["graph"]["hash"].toString());
    // All five views have something to show.
    w.graphView()->waitForLayout();
    QVERIFY(w.graphView()->canvas()->drawnItems() > 0);
    auto* passes = static_cast<PassesView*>(w.view("passes"));
    QVERIFY(passes->table()->rowCount() > 5);
    QVERIFY(passes->shownPass() >= 0);
    QVERIFY(w.view("kernels")->findChild<QTableWidget*>()->rowCount() > 0);
    // A missing model is one clear error, and the open document stays.
    QVERIFY(!w.openPath(env("KILN_STUDIO_MODEL") + ".missing.pt", &error));
    QVERIFY2(error.contains(".missing.pt"), qPrintable(error));
    QCOMPARE(w.document(), doc);
  }

  void compilingReportsItsStagesAndCancelStopsIt() {
    // The progress kiln-studio's dialog shows: the import, then every pass
    // in order with a rising percentage; false from the callback cancels.
    driver::CompileOptions options;
    options.model.path = env("KILN_STUDIO_MODEL").toStdString();
    std::vector<std::pair<int, std::string>> stages;
    auto report = kiln::studio::compileModelReport(options, [&](int percent, const std::string& stage) {
      stages.emplace_back(percent, stage);
      return true;
    });
    QVERIFY2(report.ok(), report.ok() ? "" : report.error().message.c_str());
    QVERIFY(stages.size() > 5);
    QVERIFY2(stages.front().second.rfind("importing ", 0) == 0, stages.front().second.c_str());
    QVERIFY2(stages[1].second.rfind("pass 1 of ", 0) == 0, stages[1].second.c_str());
    for (size_t i = 1; i < stages.size(); ++i) QVERIFY(stages[i].first >= stages[i - 1].first);
    size_t calls = 0;
    auto cancelled = kiln::studio::compileModelReport(options, [&](int, const std::string& stage) {
      ++calls;
      return stage.rfind("pass 3 ", 0) != 0;  // Cancel when the third pass begins
    });
    QVERIFY(!cancelled.ok());
    QCOMPARE(QString::fromStdString(cancelled.error().message), QString("cancelled"));
    QVERIFY(cancelled.error().kind == kiln::ErrorKind::kCancelled);
    QCOMPARE(calls, size_t(4));  // the import and passes 1 to 3, none after
    // Cancel pressed while the model is being imported: the import stops
    // (it asks between its phases and every few hundred nodes), no pass runs.
    std::atomic<bool> cancel{false};
    stages.clear();
    auto during_import = kiln::studio::compileModelReport(
        options,
        [&](int percent, const std::string& stage) {
          stages.emplace_back(percent, stage);
          cancel = true;  // the user presses Cancel as the import begins
          return true;
        },
        &cancel);
    QVERIFY(!during_import.ok());
    QVERIFY(during_import.error().kind == kiln::ErrorKind::kCancelled);
    QCOMPARE(stages.size(), size_t(1));
    QVERIFY2(stages.front().second.rfind("importing ", 0) == 0, stages.front().second.c_str());
  }

  void compileOptionsReachTheStepAndTheMeasuredRun() {
    // kiln-studio MODEL --amp bf16 --loss mse --optimizer sgd: the step it
    // compiles, and the kiln train that Measure starts, use those options.
    MainWindow w;
    driver::CompileOptions options;
    options.amp = "bf16";
    options.loss = "mse";
    options.optimizer = "sgd";
    options.momentum = 0.9;
    w.setCompileOptions(options);
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_MODEL"), &error), qPrintable(error));
    for (auto doc : {w.document(), std::shared_ptr<const StudioDocument>()}) {
      if (!doc) {  // second round: the measured run's report
        QVERIFY2(w.measure(&error), qPrintable(error));
        doc = w.document();
        QCOMPARE(QString::fromStdString(doc->command()), QString("train"));
      }
      const driver::Report& r = doc->report();
      QCOMPARE(QString::fromStdString(r.options["amp"].get<std::string>()), QString("bf16"));
      QCOMPARE(QString::fromStdString(r.training.loss), QString("mse"));
      QCOMPARE(QString::fromStdString(r.training.optimizer), QString("sgd"));
      QCOMPARE(r.options["momentum"].get<double>(), 0.9);
      bool amp_changed = false;
      for (const auto& p : r.passes)
        if (p.name == "amp") amp_changed = p.changed;
      QVERIFY(amp_changed);
    }
  }

  void aModelMeasuredInThisProcess() {
    // Run > Measure in this process: driver::runTraining on a worker thread.
    MainWindow w;
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_MODEL"), &error), qPrintable(error));
    QVERIFY2(w.measure(&error, 1), qPrintable(error));
    auto doc = w.document();
    QCOMPARE(QString::fromStdString(doc->command()), QString("train"));
    const driver::Report& r = doc->report();
    QVERIFY(r.steps.has_value());
    QCOMPARE(int(r.steps->size()), 5);
    QVERIFY((*r.steps)[4].loss > 0);
    QVERIFY(r.kernels[0].measured_ms.has_value());
    QVERIFY(!r.communication.has_value());
    QVERIFY(doc->hasPassIr());
  }

  void aMeasuredModelFillsAllFiveViews() {
    // What a new user does: open a bundled model, Run > Measure.
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY(!w.measure(&error));  // nothing open yet
    QVERIFY2(error.contains("open a model"), qPrintable(error));
    QVERIFY2(w.openPath(env("KILN_STUDIO_MODEL"), &error), qPrintable(error));
    QVERIFY2(w.measure(&error), qPrintable(error));
    auto doc = w.document();
    QCOMPARE(QString::fromStdString(doc->command()), QString("train"));
    w.waitForLayouts();
    QVERIFY(w.graphView()->canvas()->drawnItems() > 0);                                         // graph
    QVERIFY(doc->hasPassIr() && static_cast<PassesView*>(w.view("passes"))->shownPass() >= 0);  // passes
    auto* chart = static_cast<kiln::studio::MemoryView*>(w.view("memory"))->chart();
    QVERIFY(chart->nodeAt(QPoint(chart->width() / 2, chart->height() / 2)) > 0);  // memory
    auto* kernels = w.view("kernels")->findChild<QTableWidget*>();
    bool timed = false;
    QVERIFY(kernels->item(0, 6)->data(Qt::UserRole).toDouble(&timed) >= 0 && timed);  // kernels
    QVERIFY(w.view("comm")->findChild<QTableWidget*>()->rowCount() >= 2);                // comm
  }

  void passesViewShowsAPassBeforeAndAfter() {
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_MODEL"), &error), qPrintable(error));
    auto* passes = static_cast<PassesView*>(w.view("passes"));
    const int fuse = passes->passIndex("fuse");
    QVERIFY(fuse >= 0);
    QVERIFY2(passes->showPass(size_t(fuse)), qPrintable(passes->headline()));
    passes->waitForLayout();
    const auto& d = passes->diff();
    // fuse replaces chains of elementwise nodes by fused ones.
    QVERIFY(d.removed > 0 && d.added > 0);
    QVERIFY2(passes->headline().contains("added") && passes->headline().contains("removed"),
             qPrintable(passes->headline()));
    QVERIFY(passes->diffText().contains("@@ "));
    QVERIFY(passes->diffText().contains("\n+") && passes->diffText().contains("fused_"));
    QCOMPARE(passes->before()->drawnItems(), passes->before()->folded().items.size());
    QCOMPARE(passes->after()->drawnItems(), passes->after()->folded().items.size());
    // Every added node is tied to what it replaced.
    int tied = 0;
    for (size_t a = 0; a < d.after.size(); ++a)
      if (d.after[a] == driver::NodeChange::Added) tied += !d.before_of_after[a].empty();
    QCOMPARE(tied, d.added);
    // A click on a removed node selects what replaced it on the other side.
    int removed = -1;
    for (size_t b = 0; b < d.before.size() && removed < 0; ++b)
      if (d.before[b] == driver::NodeChange::Removed && !d.after_of_before[b].empty()) removed = int(b);
    QVERIFY(removed >= 0);
    passes->before()->select(removed);
    passes->before()->on_selected(removed);  // what a click reports
    passes->waitForLayout();
    QCOMPARE(passes->after()->selectedNode(), d.after_of_before[size_t(removed)].front());
    // Exports of the view are not blank.
    QVERIFY(w.showView("passes"));
    QTemporaryDir dir;
    QVERIFY2(w.exportCurrentView(dir.filePath("passes.png"), &error), qPrintable(error));
    QVERIFY(colours(QImage(dir.filePath("passes.png"))) > 2);
  }

  void aReportWithoutPassIrSaysHowToGetIt() {
    MainWindow w;
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    auto* passes = static_cast<PassesView*>(w.view("passes"));
    QVERIFY(passes->table()->rowCount() > 5);
    QVERIFY2(passes->headline().contains("--report-pass-ir"), qPrintable(passes->headline()));
    QVERIFY(!passes->showPass(0));
  }

  // Two reports of gpt2_mini made with different options (the second under
  // --memory-budget 500KB): the compare view's rows are the reports' numbers.
  void compareViewShowsTwoReportsSideBySide() {
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY(!w.compareWith(env("KILN_STUDIO_REMAT_REPORT"), &error));  // nothing open to compare with
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    QVERIFY(!w.compareWith(env("KILN_STUDIO_REMAT_REPORT") + ".missing.json", &error));
    QVERIFY2(error.contains("missing.json"), qPrintable(error));
    QVERIFY2(w.compareWith(env("KILN_STUDIO_REMAT_REPORT"), &error), qPrintable(error));
    QCOMPARE(w.currentView()->name(), QString("compare"));
    auto* view = static_cast<kiln::studio::CompareView*>(w.view("compare"));
    const auto readJson = [](const QString& path) {
      QFile f(path);
      f.open(QIODevice::ReadOnly);
      return QJsonDocument::fromJson(f.readAll()).object();
    };
    const QJsonObject a = readJson(env("KILN_STUDIO_COMPILE_REPORT")), b = readJson(env("KILN_STUDIO_REMAT_REPORT"));
    const double peak_a = a["memory"].toObject()["peak_bytes"].toDouble();
    const double peak_b = b["memory"].toObject()["peak_bytes"].toDouble();
    QVERIFY(peak_b < peak_a);  // the budget lowered it
    QTableWidget* summary = view->summaryTable();
    int peak_row = -1;
    for (int r = 0; r < summary->rowCount(); ++r)
      if (summary->item(r, 0)->text() == "peak memory") peak_row = r;
    QVERIFY(peak_row >= 0);
    QCOMPARE(summary->item(peak_row, 1)->data(Qt::UserRole).toDouble(), peak_a);
    QCOMPARE(summary->item(peak_row, 2)->data(Qt::UserRole).toDouble(), peak_b);
    QCOMPARE(summary->item(peak_row, 3)->text(), QString::number(peak_b / peak_a, 'f', 2) + "x");
    // Compile reports have no times: the ops table compares node counts,
    // and its counts add up to each side's kernels.
    QVERIFY(!view->comparison().measured);
    QTableWidget* ops = view->table("op");
    QCOMPARE(ops->columnCount(), 3);
    double nodes_a = 0, nodes_b = 0;
    for (int r = 0; r < ops->rowCount(); ++r) {
      nodes_a += ops->item(r, 1)->data(Qt::UserRole).toDouble();
      nodes_b += ops->item(r, 2)->data(Qt::UserRole).toDouble();
    }
    QCOMPARE(nodes_a, double(a["kernels"].toArray().size()));
    QCOMPARE(nodes_b, double(b["kernels"].toArray().size()));
    // remat ran in both pipelines; only B's recomputed (more nodes after it).
    QTableWidget* passes = view->table("passes");
    int remat = -1;
    for (int r = 0; r < passes->rowCount(); ++r)
      if (passes->item(r, 0)->text() == "remat") remat = r;
    QVERIFY(remat >= 0);
    QVERIFY(passes->item(remat, 2)->data(Qt::UserRole).toDouble() > passes->item(remat, 1)->data(Qt::UserRole).toDouble());
    // The final graphs, matched as the passes view matches: every node of
    // each side is the same, changed, added or removed.
    const auto& d = view->graphDiff();
    QCOMPARE(int(d.after.size()), b["graph"].toObject()["nodes"].toInt());
    QCOMPARE(int(d.before.size()), a["graph"].toObject()["nodes"].toInt());
    QVERIFY(d.added > 0);  // the recomputed nodes
    QVERIFY(w.exportCurrentView(QDir::temp().filePath("kiln-compare-view.png"), &error));
  }

  void trainReportFillsTheCommunicationView() {
    MainWindow w;
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    auto* table = w.view("comm")->findChild<QTableWidget*>();
    QVERIFY(table);
    QVERIFY2(table->rowCount() >= 2, "expected the gradient buckets and the loss allreduce");
    bool allreduce = false;
    for (int r = 0; r < table->rowCount(); ++r) allreduce |= table->item(r, 1)->text().startsWith("allreduce");
    QVERIFY(allreduce);
  }

  void kernelsViewShowsMeasuredTimes() {
    MainWindow w;
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    auto* table = w.view("kernels")->findChild<QTableWidget*>();
    QVERIFY(table && table->rowCount() > 0);
    double share = 0;
    for (int r = 0; r < table->rowCount(); ++r) {
      bool ok = false;
      QVERIFY(table->item(r, 6)->data(Qt::UserRole).toDouble(&ok) >= 0 && ok);
      share += table->item(r, 7)->data(Qt::UserRole).toDouble();
      // Shown with three significant digits and a unit, not 0.0299731.
      const QString shown = table->item(r, 6)->text();
      QVERIFY2(shown.endsWith(" us") || shown.endsWith(" ms") || shown.endsWith(" s"), qPrintable(shown));
    }
    QVERIFY2(std::abs(share - 100) < 1e-6, qPrintable(QString::number(share)));
    QVERIFY(w.view("kernels")->findChild<QLabel*>()->text().contains("measured while training"));
    // A compile report has none, and says where they come from.
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    QVERIFY(w.view("kernels")->findChild<QLabel*>()->text().contains("kiln train --report"));
  }

  void timelineShowsEveryThreadOfTheRecordedSteps() {
    MainWindow w;
    w.resize(1400, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    const driver::Report& r = w.document()->report();
    QVERIFY(r.timeline.has_value());
    const driver::ReportTimeline& t = *r.timeline;
    QCOMPARE(int(t.steps.size()), 3);  // kiln train --steps 3: every step recorded
    QVERIFY(w.showView("timeline"));
    auto* view = static_cast<kiln::studio::TimelineView*>(w.view("timeline"));
    auto* chart = view->chart();
    QTableWidget* table = view->idleTable();
    // A row per thread: the executor first, a row per pool thread, the collectives' row (2 ranks).
    QCOMPARE(table->rowCount(), int(t.rows.size()));
    QCOMPARE(table->item(0, 0)->text(), QString("main (executor)"));
    int pool = 0, comm = -1;
    for (size_t i = 0; i < t.rows.size(); ++i) {
      pool += t.rows[i].kind == "pool";
      if (t.rows[i].kind == "comm") comm = int(i);
    }
    QCOMPARE(pool, int(r.execution.threads) - 1);
    QVERIFY(comm > 0);
    for (size_t k = 0; k < t.steps.size(); ++k) {
      view->showStep(int(k));
      const double lo = t.steps[k].start_ms, hi = t.steps[k].end_ms;
      QVERIFY(chart->rangeLo() <= lo && chart->rangeHi() >= hi);
      // Every node once per step, on the executor or a pool thread.
      std::vector<int> ran(r.kernels.size(), 0);
      double executor_busy = 0, comm_busy = 0;
      for (const driver::TimelineSlice& x : t.slices) {
        if (x.start_ms < lo || x.start_ms > hi) continue;
        if (x.category == "node") ++ran[size_t(x.node)];
        // One thread runs one thing at a time: its busy time is the sum of its slices.
        if (x.row == 0 && x.category != "wait") executor_busy += std::min(x.start_ms + x.dur_ms, hi) - x.start_ms;
        if (x.row == comm) comm_busy += std::min(x.start_ms + x.dur_ms, hi) - x.start_ms;
      }
      QVERIFY(std::all_of(ran.begin(), ran.end(), [](int n) { return n == 1; }));
      auto cell = [&](int row, int col) { return table->item(row, col)->data(Qt::UserRole).toDouble(); };
      QVERIFY2(std::abs(cell(0, 1) - executor_busy) < 1e-6 * (hi - lo) + 1e-9,
               qPrintable(QString("executor busy %1 != %2").arg(cell(0, 1)).arg(executor_busy)));
      QVERIFY(std::abs(cell(comm, 1) - comm_busy) < 1e-6 * (hi - lo) + 1e-9);
      for (int row = 0; row < table->rowCount(); ++row) {
        // Busy, intra-op and idle add up to the step; the share is idle over it.
        QVERIFY(std::abs(cell(row, 1) + cell(row, 2) + cell(row, 3) - (hi - lo)) < 1e-6 * (hi - lo));
        QVERIFY(std::abs(cell(row, 4) - 100 * cell(row, 3) / (hi - lo)) < 1e-6);
      }
    }
    // A click on a kernel's slice selects its node in the graph and the kernels table:
    // the longest kernel of the last step on the executor's row, zoomed to fill the view.
    view->showStep(2);
    int widest = -1;
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const driver::TimelineSlice& x = t.slices[i];
      if (x.category == "node" && x.row == 0 && x.start_ms >= t.steps[2].start_ms &&
          (widest < 0 || x.dur_ms > t.slices[size_t(widest)].dur_ms))
        widest = int(i);
    }
    QVERIFY(widest >= 0);
    const driver::TimelineSlice& longest = t.slices[size_t(widest)];
    chart->setRange(longest.start_ms - longest.dur_ms, longest.start_ms + 2 * longest.dur_ms);
    QVERIFY(chart->sliceRect(size_t(widest)).width() > 100);
    const QPoint at = chart->sliceRect(size_t(widest)).center().toPoint();
    QCOMPARE(chart->sliceAt(at), widest);
    const std::string& widest_node = r.kernels[size_t(longest.node)].node;
    QVERIFY(chart->describeAt(at).contains(QString::fromStdString(widest_node)));
    QTest::mouseClick(chart, Qt::LeftButton, {}, at);
    const int node = int(t.slices[size_t(widest)].node);
    QCOMPARE(w.graphView()->selectedNode(), node);
    auto* kernels = w.view("kernels")->findChild<QTableWidget*>();
    QVERIFY(!kernels->selectedItems().isEmpty());
    QCOMPARE(kernels->item(kernels->selectedItems().first()->row(), 0)->data(Qt::DisplayRole).toInt(), node);
    // Home fits the step again; zoom around a point keeps it in place; keys pan and fit back.
    QTest::keyClick(chart, Qt::Key_Home);
    const double lo = chart->rangeLo(), hi = chart->rangeHi();
    QVERIFY(lo <= t.steps[2].start_ms && hi >= t.steps[2].end_ms && hi - lo < 1.1 * (t.steps[2].end_ms - lo));
    chart->zoom(2, (chart->rowRect(0).left() + chart->rowRect(0).right()) / 2);
    QVERIFY(std::abs((chart->rangeHi() - chart->rangeLo()) - (hi - lo) / 2) < 1e-9 * (hi - lo) + 1e-12);
    QTest::keyClick(chart, Qt::Key_Right);
    QVERIFY(chart->rangeLo() > lo);
    QTest::keyClick(chart, Qt::Key_Home);
    QCOMPARE(chart->rangeLo(), lo);
    // A compile report has no timeline, and says where one comes from.
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    QCOMPARE(view->idleTable()->rowCount(), 0);
    QVERIFY(view->findChild<QLabel*>()->text().contains("kiln train --report"));
  }

  void rooflinePlacesEveryMeasuredKernelUnderTheRoofs() {
    MainWindow w;
    w.resize(1400, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    const driver::Report& r = w.document()->report();
    QVERIFY2(r.machine.has_value(), "the fixture ran kiln bench --machine into the train report's cache directory");
    const driver::ReportMachine& m = *r.machine;
    QVERIFY(w.showView("roofline"));
    auto* view = static_cast<kiln::studio::RooflineView*>(w.view("roofline"));
    auto* chart = view->chart();
    // From the report itself: the points are the measured kernels with arithmetic;
    // the table has every measured kernel, first the one losing the most time below its roof.
    size_t with_flops = 0, measured = 0;
    double most_lost = 0;
    for (const driver::ReportKernel& k : r.kernels) {
      if (!k.measured_ms || *k.measured_ms <= 0 || k.bytes <= 0) continue;
      ++measured;
      with_flops += k.flops > 0;
      const double s = *k.measured_ms / 1000;
      const double compute = k.dtype == "bf16" && m.bf16_gemm_flops ? *m.bf16_gemm_flops : m.fp32_gemm_flops;
      const double of_roof = k.flops > 0 ? (k.flops / s) / std::min(compute, m.bandwidth_bytes * k.flops / k.bytes)
                                         : (k.bytes / s) / m.bandwidth_bytes;
      most_lost = std::max(most_lost, *k.measured_ms * std::max(0.0, 1 - of_roof));
    }
    QVERIFY(with_flops > 10);
    QCOMPARE(chart->points().size(), with_flops);
    QCOMPARE(size_t(view->table()->rowCount()), measured);
    view->table()->sortByColumn(6, Qt::DescendingOrder);
    const double first = view->table()->item(0, 6)->data(Qt::UserRole).toDouble();
    QVERIFY2(std::abs(first - most_lost) < 1e-9 * std::max(1.0, most_lost),
             qPrintable(QString("%1 != %2").arg(first).arg(most_lost)));
    // Points where their numbers say: higher FLOP/s higher up, more intensity further right.
    const auto& pts = chart->points();
    for (size_t i = 0; i < pts.size(); ++i) {
      QVERIFY(std::abs(chart->pointPos(i).y() - chart->yOf(pts[i].flops_per_s)) < 1e-9);
      QVERIFY(std::abs(chart->pointPos(i).x() - chart->xOf(pts[i].intensity)) < 1e-9);
    }
    QVERIFY(chart->yOf(m.fp32_gemm_flops) > chart->rect().top() && chart->yOf(m.fp32_gemm_flops) < chart->height());
    // Hover names the node; a click selects it.
    size_t biggest = 0;
    for (size_t i = 0; i < pts.size(); ++i)
      if (pts[i].ms > pts[biggest].ms) biggest = i;
    const QPoint at = chart->pointPos(biggest).toPoint();
    const int hit = chart->pointAt(at);
    QVERIFY(hit >= 0);
    const size_t node = pts[size_t(hit)].kernel;
    QVERIFY(chart->describeAt(at).contains(QString::fromStdString(r.kernels[node].node)));
    QTest::mouseClick(chart, Qt::LeftButton, {}, at);
    QCOMPARE(w.graphView()->selectedNode(), int(node));
    QVERIFY(view->findChild<QLabel*>()->text().contains("kiln bench --machine"));
  }

  void trainingViewShowsTheScheduleAndEvaluations() {
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_RECIPE_REPORT"), &error), qPrintable(error));
    QVERIFY(w.showView("training"));
    auto* view = static_cast<kiln::studio::TrainingView*>(w.view("training"));
    QApplication::processEvents();
    const auto& r = w.document()->report();
    QVERIFY(r.recipe && r.steps);
    QCOMPARE(int(r.recipe->schedule.size()), 1);
    QCOMPARE(int(r.recipe->evaluations.size()), 3);
    // One row per schedule point and evaluation, by step.
    QTableWidget* t = view->table();
    QCOMPARE(t->rowCount(), 4);
    QCOMPARE(t->item(0, 0)->data(Qt::UserRole).toDouble(), 2.0);  // the evaluation after step 2
    QCOMPARE(t->item(1, 1)->text(), QString("schedule point"));
    QCOMPARE(t->item(1, 2)->text(), QString("freeze h.0"));
    QCOMPARE(t->item(1, 4)->text(), QString::fromStdString(r.recipe->schedule[0].cache));
    QVERIFY(view->summary().contains("1 schedule points"));
    QVERIFY2(view->summary().contains("did not reach loss <= 0"), qPrintable(view->summary()));
    // The chart marks the schedule point where it happened, and says what it cost.
    auto* chart = view->chart();
    const QPointF at(chart->xOf(3), chart->height() / 2.0);
    QVERIFY2(chart->describeAt(at).contains("freeze h.0"), qPrintable(chart->describeAt(at)));
    QVERIFY(chart->describeAt(at).contains("ms"));
    QTemporaryDir dir;
    QVERIFY2(w.exportCurrentView(dir.filePath("training.png"), &error), qPrintable(error));
    QVERIFY(colours(QImage(dir.filePath("training.png"))) > 3);
    // A report without a recipe says how to get one.
    QVERIFY2(w.openPath(env("KILN_STUDIO_COMPILE_REPORT"), &error), qPrintable(error));
    QCOMPARE(view->table()->rowCount(), 0);
    QVERIFY(view->summary().contains("No training"));
  }

  void everyTableExportsAsCsv() {
    MainWindow w;
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    QVERIFY2(w.compareWith(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    QTemporaryDir dir;
    for (const char* name : {"passes", "memory", "kernels", "comm", "timeline", "roofline", "compare"}) {
      QVERIFY(w.showView(name));
      QTableWidget* table = w.currentView()->csvTable();
      QVERIFY2(table && table->rowCount() > 0, name);
      const QString path = dir.filePath(QString(name) + ".csv");
      QVERIFY2(w.exportCurrentTable(path, &error), qPrintable(error));
      QFile f(path);
      QVERIFY(f.open(QIODevice::ReadOnly));
      const QStringList lines = QString::fromUtf8(f.readAll()).split("\r\n", Qt::SkipEmptyParts);
      QCOMPARE(lines.size(), table->rowCount() + 1);
      // Every column titled; a number shown with a unit is written whole, the unit in the title.
      for (int c = 0; c < table->columnCount(); ++c) {
        const QString unit = table->item(0, c) ? table->item(0, c)->data(kiln::studio::NumberItem::kUnitRole).toString()
                                                : QString();
        const QString title = table->horizontalHeaderItem(c)->text();
        QVERIFY2(lines[0].contains(unit.isEmpty() ? title : title + " (" + unit + ")"), qPrintable(lines[0]));
        if (unit.isEmpty() || lines[1].contains('"')) continue;  // quoted text: not split here
        bool ok = false;
        const double written = lines[1].split(',')[c].toDouble(&ok);
        const double shown = table->item(0, c)->data(Qt::UserRole).toDouble();
        QVERIFY2(ok && std::abs(written - shown) <= 1e-9 * std::abs(shown),
                 qPrintable(QString("%1 column %2: %3 vs %4").arg(name).arg(c).arg(lines[1]).arg(shown)));
      }
    }
    QVERIFY(w.showView("graph"));
    QVERIFY(!w.exportCurrentTable(dir.filePath("graph.csv"), &error));
    QVERIFY2(error.contains("has no table"), qPrintable(error));
    QVERIFY(!QFile::exists(dir.filePath("graph.csv")));
  }

  void keyboardReachesTheChartsAndTheGraph() {
    MainWindow w;
    w.resize(1400, 800);
    w.show();
    QString error;
    QVERIFY2(w.openPath(env("KILN_STUDIO_TRAIN_REPORT"), &error), qPrintable(error));
    GraphView* g = w.graphView();
    g->waitForLayout();
    const kiln::Graph& graph = *w.document()->graph();
    std::vector<const kiln::Node*> nodes;
    for (const auto& n : graph.nodes()) nodes.push_back(n.get());
    // Graph: Right steps through the schedule, Up goes to the producer of the first input.
    int start = -1;
    for (size_t i = 1; i + 1 < nodes.size() && start < 0; ++i)
      if (!nodes[i + 1]->inputs().empty() && nodes[i + 1]->inputs()[0]->producer()) start = int(i);
    QVERIFY(start > 0);
    g->select(start);
    g->waitForLayout();
    QWidget* canvas = g->canvas()->view();
    QTest::keyClick(canvas, Qt::Key_Right);
    g->waitForLayout();
    QCOMPARE(g->selectedNode(), start + 1);
    QTest::keyClick(canvas, Qt::Key_Up);
    g->waitForLayout();
    const kiln::Node* producer = nodes[size_t(start + 1)]->inputs()[0]->producer();
    QCOMPARE(g->selectedNode(), int(std::find(nodes.begin(), nodes.end(), producer) - nodes.begin()));
    QTest::keyClick(canvas, Qt::Key_Down);  // the first reader of the producer's outputs
    g->waitForLayout();
    QVERIFY(g->selectedNode() > int(std::find(nodes.begin(), nodes.end(), producer) - nodes.begin()));
    // Memory: a cursor moved by the keys, Enter selects its node in the graph.
    QVERIFY(w.showView("memory"));
    auto* memory = static_cast<kiln::studio::MemoryView*>(w.view("memory"))->chart();
    QTest::keyClick(memory, Qt::Key_Home);
    QCOMPARE(memory->cursorNode(), 0);
    QTest::keyClick(memory, Qt::Key_Right);
    QTest::keyClick(memory, Qt::Key_Right);
    QCOMPARE(memory->cursorNode(), 2);
    QTest::keyClick(memory, Qt::Key_Return);
    QCOMPARE(g->selectedNode(), 2);
    // Roofline: Right steps to a point, Enter selects its node.
    QVERIFY(w.showView("roofline"));
    auto* roofline = static_cast<kiln::studio::RooflineView*>(w.view("roofline"))->chart();
    QTest::keyClick(roofline, Qt::Key_Right);
    QTest::keyClick(roofline, Qt::Key_Right);
    QVERIFY(roofline->cursorPoint() >= 0);
    QTest::keyClick(roofline, Qt::Key_Return);
    QCOMPARE(g->selectedNode(), int(roofline->points()[size_t(roofline->cursorPoint())].kernel));
  }

  void badFilesGiveOneClearError() {
    QTemporaryDir dir;
    const QString junk = dir.filePath("junk.json"), other = dir.filePath("other.json");
    QFile f(junk);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"schema\": \"kiln-report\", \"version\": 1, \"passes\": [");  // truncated
    f.close();
    QFile g(other);
    QVERIFY(g.open(QIODevice::WriteOnly));
    g.write("{\"hello\": 1}");
    g.close();
    MainWindow w;
    QString error;
    QVERIFY(!w.openPath(junk, &error));
    QVERIFY2(error.contains("not JSON") && error.contains(junk), qPrintable(error));
    QVERIFY(!w.openPath(other, &error));
    QVERIFY2(error.contains("not a kiln report"), qPrintable(error));
    // A key renamed or retyped by one side: an error naming it and the version.
    nlohmann::json good;
    {
      QFile r(env("KILN_STUDIO_COMPILE_REPORT"));
      QVERIFY(r.open(QIODevice::ReadOnly));
      good = nlohmann::json::parse(r.readAll().toStdString());
    }
    auto broken = [&](const char* name, auto&& mutate) {
      nlohmann::json j = good;
      mutate(j);
      const QString p = dir.filePath(name);
      QFile out(p);
      if (!out.open(QIODevice::WriteOnly)) return p;
      out.write(QByteArray::fromStdString(j.dump()));
      return p;
    };
    const QString renamed = broken("renamed.json", [](nlohmann::json& j) {
      j["memory"]["peak"] = j["memory"]["peak_bytes"];
      j["memory"].erase("peak_bytes");
    });
    QVERIFY(!w.openPath(renamed, &error));
    QVERIFY2(error.contains("report version 1: memory.peak_bytes: missing"), qPrintable(error));
    const QString retyped = broken("retyped.json", [](nlohmann::json& j) { j["passes"][2]["millis"] = "fast"; });
    QVERIFY(!w.openPath(retyped, &error));
    QVERIFY2(error.contains("passes[2].millis: expected a number, got a string"), qPrintable(error));
    QVERIFY(!w.openPath(dir.filePath("missing.json"), &error));
    QVERIFY2(error.contains("missing.json"), qPrintable(error));
    QVERIFY(!w.document());  // nothing was opened
  }

  void windowRemembersItsView() {
    {
      MainWindow w;
      QVERIFY(w.showView("memory"));
    }
    MainWindow again;
    QCOMPARE(again.currentView()->name(), QString("memory"));
  }
};

QTEST_MAIN(StudioTest)
#include "studio_test.moc"
