#include "gui/views/compare_view.h"

#include <QFileInfo>
#include <algorithm>
#include <map>
#include <QFontDatabase>
#include <QHeaderView>
#include <QVBoxLayout>

#include "driver/messages.h"
#include "driver/provenance_paths.h"

namespace kiln::studio {
namespace {

QTableWidget* makeTable(QWidget* parent) {
  auto* t = new QTableWidget(parent);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  // Numbers next to their names, not stretched to the far edge.
  t->horizontalHeader()->setStretchLastSection(false);
  t->verticalHeader()->setVisible(false);
  return t;
}

/// A cell that shows `text` and sorts by `value`.
QTableWidgetItem* cell(const QString& text, double value, const QString& tip = {}) {
  auto* item = new QTableWidgetItem(text);
  item->setData(Qt::UserRole, value);
  item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  if (!tip.isEmpty()) item->setToolTip(tip);
  return item;
}

QString quantity(double v, const std::string& unit) {
  return QString::fromStdString(driver::formatQuantity(v, unit));
}

void setRows(QTableWidget* t, const QStringList& columns, int rows) {
  t->setSortingEnabled(false);
  t->clear();
  t->setColumnCount(int(columns.size()));
  t->setHorizontalHeaderLabels(columns);
  t->setRowCount(rows);
  static const std::map<QString, QString> kTips{
      {"A", "the baseline report (the first)"},
      {"B", "the report compared with it (the second)"},
      {"B/A", "B divided by A: below 1.00x, B is smaller or faster"},
      {"B - A", "the change in measured kernel time per step; the rows are sorted by its size"},
      {"A nodes", "nodes of this key in A's final graph"},
      {"B nodes", "nodes of this key in B's final graph"},
      {"A work", "flops of the graph after this pass in A"},
      {"B work", "flops of the graph after this pass in B"},
      {"A time", "how long the pass took in A"},
      {"B time", "how long the pass took in B"}};
  for (int c = 0; c < t->columnCount(); ++c)
    if (auto it = kTips.find(columns[c]); it != kTips.end()) t->horizontalHeaderItem(c)->setToolTip(it->second);
}

}  // namespace

CompareView::CompareView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  headline_ = new QLabel(this);
  headline_->setWordWrap(true);
  summary_ = makeTable(this);
  tabs_ = new QTabWidget(this);
  by_op_ = makeTable(tabs_);
  by_scope_ = makeTable(tabs_);
  by_node_ = makeTable(tabs_);
  passes_ = makeTable(tabs_);
  auto* graphs = new QWidget(tabs_);
  auto* graph_layout = new QVBoxLayout(graphs);
  graph_summary_ = new QLabel(graphs);
  graph_summary_->setWordWrap(true);
  graph_text_ = new QPlainTextEdit(graphs);
  graph_text_->setReadOnly(true);
  graph_text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  graph_layout->addWidget(graph_summary_);
  graph_layout->addWidget(graph_text_);
  tabs_->addTab(by_op_, "by op");
  tabs_->addTab(by_scope_, "by scope");
  tabs_->addTab(by_node_, "by node");
  tabs_->addTab(passes_, "passes");
  tabs_->addTab(graphs, "final graphs");
  layout->addWidget(headline_);
  layout->addWidget(summary_);
  layout->addWidget(tabs_, 1);
  setDocument(nullptr);
}

void CompareView::setDocument(std::shared_ptr<const StudioDocument>) {
  headline_->setText(
      "Compare two runs: File > Compare... (Ctrl+D) picks a second report to compare the open one with, or start "
      "kiln-studio A.json B.json. kiln compare-reports prints the same headless.");
}

QTableWidget* CompareView::table(const QString& which) const {
  if (which == "op") return by_op_;
  if (which == "scope") return by_scope_;
  if (which == "node") return by_node_;
  if (which == "passes") return passes_;
  return nullptr;
}

void CompareView::setComparison(std::shared_ptr<const StudioDocument> a, std::shared_ptr<const StudioDocument> b) {
  comparison_ = driver::compareReports(a->report(), b->report());
  const QString na = QFileInfo(QString::fromStdString(a->path())).fileName();
  const QString nb = QFileInfo(QString::fromStdString(b->path())).fileName();
  QString head = QString("A: %1 (baseline)    B: %2").arg(na, nb);
  if (a->report().model.path != b->report().model.path)
    head += "    (different models: nodes and scopes may not correspond)";
  headline_->setText(head);
  headline_->setToolTip(QString::fromStdString(a->path() + "\n" + b->path()));

  setRows(summary_, {"", "A", "B", "B/A"}, int(comparison_.summary.size()));
  for (int r = 0; r < int(comparison_.summary.size()); ++r) {
    const driver::ComparisonRow& row = comparison_.summary[size_t(r)];
    summary_->setItem(r, 0, new QTableWidgetItem(QString::fromStdString(row.what)));
    summary_->setItem(r, 1, cell(row.a ? quantity(*row.a, row.unit) : "-", row.a.value_or(0)));
    summary_->setItem(r, 2, cell(row.b ? quantity(*row.b, row.unit) : "-", row.b.value_or(0)));
    summary_->setItem(r, 3, cell(QString::fromStdString(driver::ratioText(row.a, row.b)), row.a && *row.a ? row.b.value_or(0) / *row.a : 0));
  }
  summary_->item(0, 0)->setToolTip(
      "step time: the median of the measured steps after the first (which pays for warm-up)");
  summary_->resizeColumnsToContents();
  // Every summary row at once, no scrolling.
  summary_->setFixedHeight(summary_->horizontalHeader()->sizeHint().height() +
                           summary_->rowCount() * summary_->verticalHeader()->defaultSectionSize() + 4);
  fillDeltas(by_op_, comparison_.by_op);
  fillDeltas(by_scope_, comparison_.by_scope);
  fillDeltas(by_node_, comparison_.by_node);
  fillPasses();
  fillGraphs(*a, *b);
}

void CompareView::fillDeltas(QTableWidget* t, const std::vector<driver::TimeDelta>& rows) {
  const bool ms = comparison_.measured;
  std::vector<std::string> keys;
  for (const driver::TimeDelta& d : rows) keys.push_back(d.key);
  const std::string dir = driver::commonSourceDir(keys);  // node keys: paths relative to it
  QStringList columns{"", "A nodes", "B nodes"};
  if (ms) columns = {"", "A", "B", "B - A", "A nodes", "B nodes"};
  setRows(t, columns, int(rows.size()));
  for (int r = 0; r < int(rows.size()); ++r) {
    const driver::TimeDelta& d = rows[size_t(r)];
    auto* key = new QTableWidgetItem(QString::fromStdString(driver::relativeToDir(d.key, dir)));
    key->setToolTip(QString::fromStdString(d.key));
    t->setItem(r, 0, key);
    int c = 1;
    if (ms) {
      t->setItem(r, c++, cell(d.a_nodes ? quantity(d.a_ms, "ms") : "-", d.a_ms, "measured time per step in A"));
      t->setItem(r, c++, cell(d.b_nodes ? quantity(d.b_ms, "ms") : "-", d.b_ms, "measured time per step in B"));
      t->setItem(r, c++, cell((d.diff() > 0 ? "+" : "") + quantity(d.diff(), "ms"), d.diff()));
    }
    t->setItem(r, c++, cell(QString::number(d.a_nodes), double(d.a_nodes)));
    t->setItem(r, c++, cell(QString::number(d.b_nodes), double(d.b_nodes)));
  }
  t->resizeColumnsToContents();
}

void CompareView::fillPasses() {
  const auto& rows = comparison_.passes;
  setRows(passes_, {"pass", "A nodes", "B nodes", "A work", "B work", "A time", "B time"}, int(rows.size()));
  for (int r = 0; r < int(rows.size()); ++r) {
    const driver::PassDelta& p = rows[size_t(r)];
    passes_->setItem(r, 0, new QTableWidgetItem(QString::fromStdString(p.pass)));
    int c = 1;
    for (auto get : {+[](const driver::ReportPass& x) { return double(x.nodes); },
                     +[](const driver::ReportPass& x) { return x.flops; },
                     +[](const driver::ReportPass& x) { return x.millis; }}) {
      const std::string unit = c == 1 ? "" : c == 3 ? "FLOP" : "ms";
      for (const auto* side : {&p.a, &p.b})
        passes_->setItem(r, c++, *side ? cell(quantity(get(**side), unit), get(**side)) : cell("-", 0, "not run"));
    }
  }
  passes_->resizeColumnsToContents();
}

void CompareView::fillGraphs(const StudioDocument& a, const StudioDocument& b) {
  graph_diff_ = {};
  const auto& ia = a.report().graph.ir;
  const auto& ib = b.report().graph.ir;
  if (!ia || !ib) {
    graph_summary_->setText("A report without its graph (graph.ir): nothing to diff.");
    graph_text_->clear();
    return;
  }
  auto ga = driver::parsePassGraph(*ia, a.path() + " (graph.ir)");
  auto gb = driver::parsePassGraph(*ib, b.path() + " (graph.ir)");
  if (!ga || !gb) {
    graph_summary_->setText(QString::fromStdString((!ga ? ga.error() : gb.error()).message));
    graph_text_->clear();
    return;
  }
  graph_diff_ = driver::diffPassGraphs(*ga, *gb);
  const int same = int(std::count(graph_diff_.after.begin(), graph_diff_.after.end(), driver::NodeChange::Same));
  graph_summary_->setText(QString("A: %1 nodes, B: %2 nodes. Matched as the passes view matches a pass's before and "
                                  "after: %3 the same, %4 changed, %5 only in B, %6 only in A.")
                              .arg(ga->graph.numNodes())
                              .arg(gb->graph.numNodes())
                              .arg(same)
                              .arg(graph_diff_.changed)
                              .arg(graph_diff_.added)
                              .arg(graph_diff_.removed));
  const std::string text = driver::unifiedDiff(*ia, *ib);
  graph_text_->setPlainText(text.empty() ? QString("(the final graphs are the same)") : QString::fromStdString(text));
}

QTableWidget* CompareView::csvTable() {
  auto* shown = qobject_cast<QTableWidget*>(tabs_->currentWidget());
  return shown ? shown : summary_;
}

}  // namespace kiln::studio
