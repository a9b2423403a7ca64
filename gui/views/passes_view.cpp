#include "gui/views/passes_view.h"

#include <QHeaderView>
#include <QSplitter>
#include <QSyntaxHighlighter>
#include <QVBoxLayout>
#include <cmath>

#include "gui/views/graph_view.h"

namespace kiln::studio {
namespace {

const QColor kAdded(0x2c, 0xa0, 0x2c), kRemoved(0xd6, 0x27, 0x28), kChanged(0xff, 0x7f, 0x0e);

/// The IR diff in colour: removed lines red, added green, hunk headers grey.
class DiffHighlighter : public QSyntaxHighlighter {
 public:
  using QSyntaxHighlighter::QSyntaxHighlighter;

 protected:
  void highlightBlock(const QString& text) override {
    QTextCharFormat f;
    if (text.startsWith('+'))
      f.setBackground(QColor(0xe6, 0xff, 0xe6)), f.setForeground(kAdded.darker(150));
    else if (text.startsWith('-'))
      f.setBackground(QColor(0xff, 0xe6, 0xe6)), f.setForeground(kRemoved.darker(130));
    else if (text.startsWith("@@"))
      f.setForeground(Qt::gray);
    else
      return;
    setFormat(0, int(text.size()), f);
  }
};

/// The frame colour of each node of one side of the diff.
std::vector<QColor> marksOf(const std::vector<driver::NodeChange>& changes) {
  std::vector<QColor> out;
  for (driver::NodeChange c : changes)
    out.push_back(c == driver::NodeChange::Added     ? kAdded
                  : c == driver::NodeChange::Removed ? kRemoved
                  : c == driver::NodeChange::Changed ? kChanged
                                             : QColor());
  return out;
}

/// Op-kind colours, paler for nodes the pass did not touch.
std::function<QColor(int)> fillOf(const Graph* g, const std::vector<driver::NodeChange>* changes) {
  auto nodes = std::make_shared<std::vector<const Node*>>();
  for (const auto& n : g->nodes()) nodes->push_back(n.get());
  return [nodes, changes](int i) {
    if (i < 0 || i >= int(nodes->size())) return QColor(Qt::white);
    const QColor c = opKindColour(*(*nodes)[size_t(i)]);
    return size_t(i) < changes->size() && (*changes)[size_t(i)] == driver::NodeChange::Same ? c.lighter(150) : c;
  };
}

}  // namespace

PassesView::PassesView(QWidget* parent) : TableView(parent) {
  auto* panel = new QWidget(this);
  auto* layout = new QVBoxLayout(panel);
  layout->setContentsMargins(0, 0, 0, 0);
  headline_ = new QLabel(panel);
  headline_->setWordWrap(true);
  tabs_ = new QTabWidget(panel);
  auto* sides = new QSplitter(tabs_);
  before_ = new GraphCanvas(sides);
  after_ = new GraphCanvas(sides);
  sides->addWidget(before_);
  sides->addWidget(after_);
  tabs_->addTab(sides, "graphs before | after");
  ir_diff_ = new QPlainTextEdit(tabs_);
  ir_diff_->setReadOnly(true);
  ir_diff_->setLineWrapMode(QPlainTextEdit::NoWrap);
  ir_diff_->setFont(QFont("monospace"));
  new DiffHighlighter(ir_diff_->document());
  tabs_->addTab(ir_diff_, "text IR diff");
  layout->addWidget(headline_);
  layout->addWidget(tabs_, 1);
  // The table above, the pass below, in a splitter the user can move.
  auto* split = new QSplitter(Qt::Vertical, this);
  auto* top = static_cast<QVBoxLayout*>(this->layout());
  top->removeWidget(table());
  split->addWidget(table());
  split->addWidget(panel);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 3);
  top->addWidget(split, 1);
  connect(table(), &QTableWidget::currentCellChanged, this, [this](int row) {
    if (QTableWidgetItem* it = row >= 0 ? table()->item(row, 0) : nullptr)
      showPass(size_t(it->data(Qt::UserRole).toInt()));
  });
  // A click on one side selects the counterparts on the other.
  before_->on_selected = [this](int node) {
    if (node >= 0 && size_t(node) < diff_.after_of_before.size() && !diff_.after_of_before[size_t(node)].empty())
      after_->select(diff_.after_of_before[size_t(node)].front(), /*reveal=*/true);
  };
  after_->on_selected = [this](int node) {
    if (node >= 0 && size_t(node) < diff_.before_of_after.size() && !diff_.before_of_after[size_t(node)].empty())
      before_->select(diff_.before_of_after[size_t(node)].front(), /*reveal=*/true);
  };
  // Once both sides are drawn, open the first change's scopes on both and
  // select it (once per pass shown: later folding is the user's).
  auto laidOut = [this] {
    if (before_->layoutRunning() || after_->layoutRunning() || !after_graph_ || reveal_tries_ <= 0) return;
    --reveal_tries_;
    for (size_t a = 0; a < diff_.after.size(); ++a)
      if (diff_.after[a] != driver::NodeChange::Same && !diff_.before_of_after[a].empty()) {
        const int b = diff_.before_of_after[a].front();
        auto alone = [](const GraphCanvas* c, int node) {
          return c->folded().items[size_t(c->folded().item_of_node[size_t(node)])].node == node;
        };
        if (alone(after_, int(a)) && alone(before_, b)) reveal_tries_ = 0;
        after_->select(int(a), /*reveal=*/true);
        before_->select(b, /*reveal=*/true);
        return;
      }
  };
  before_->on_laid_out = laidOut;
  after_->on_laid_out = laidOut;
}

void PassesView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  shown_ = -1;
  before_->setGraph(nullptr);
  after_->setGraph(nullptr);
  before_graph_.reset();
  after_graph_.reset();
  diff_ = {};
  ir_diff_->clear();
  std::vector<std::vector<QVariant>> rows;
  QString summary = "No report open.";
  if (doc_) {
    const auto& passes = doc_->passes();
    int64_t before = -1;
    double total = 0;
    for (const driver::ReportPass& p : passes) {
      QString stats;
      for (const auto& [k, v] : p.statistics) stats += QString("%1=%2 ").arg(QString::fromStdString(k)).arg(v);
      rows.push_back({QString::fromStdString(p.name), p.millis, p.changed ? "yes" : "no",
                      static_cast<qlonglong>(p.nodes),
                      before < 0 ? QVariant("-") : QVariant(static_cast<qlonglong>(p.nodes - before)), p.flops,
                      double(p.peak_bytes), stats.trimmed()});
      before = p.nodes;
      total += p.millis;
    }
    summary = QString(
                  "%1 passes, %2 ms in all. Peak memory is each pass's estimate of running its graph in "
                  "node order. Select a pass to see its graph before and after.")
                  .arg(passes.size())
                  .arg(total, 0, 'f', 2);
  }
  {
    QSignalBlocker block(table());
    fill({"pass", "time", "changed", "nodes", "delta", "flops", "peak", "statistics"}, rows, summary,
         {"", "ms", "", "", "", "FLOP", "B", ""});
    setHeaderTips(table(), {{"time", "how long the pass took"},
                            {"changed", "whether the pass changed the graph (unchanged passes show the same graph "
                                        "before and after)"},
                            {"delta", "nodes added (+) or removed (-) by the pass"},
                            {"flops", "the step's arithmetic after the pass (a multiply-add counts 2)"},
                            {"peak", "the pass's estimate of the peak memory of running its graph in node order"},
                            {"statistics", "the pass's own counters (what it fused, folded, recomputed, ...)"}});
    table()->setSortingEnabled(false);
    for (int r = 0; r < table()->rowCount(); ++r) table()->item(r, 0)->setData(Qt::UserRole, r);
    table()->setSortingEnabled(true);
  }
  if (!doc_) {
    headline_->clear();
  } else if (!doc_->hasPassIr()) {
    headline_->setText(
        "This report keeps no pass IR, so no pass can be shown before and after: write it with kiln compile "
        "--report R.json --report-pass-ir, or open the model itself in kiln-studio.");
  } else {
    // The first pass that changed the graph.
    const auto& passes = doc_->passes();
    size_t first = 0;
    while (first + 1 < passes.size() && !passes[first].changed) ++first;
    showPass(first);
  }
}

int PassesView::passIndex(const QString& name) const {
  if (!doc_) return -1;
  const auto& passes = doc_->passes();
  for (size_t i = 0; i < passes.size(); ++i)
    if (QString::fromStdString(passes[i].name) == name) return int(i);
  return -1;
}

bool PassesView::showPass(size_t index) {
  if (!doc_ || !doc_->hasPassIr()) return false;
  const auto& passes = doc_->passes();
  if (index >= passes.size()) return false;
  if (int(index) == shown_) return true;
  const std::string& name = passes[index].name;
  const std::string where = doc_->path() + ": pass " + name;
  before_->setGraph(nullptr);
  after_->setGraph(nullptr);
  before_graph_.reset();
  after_graph_.reset();
  diff_ = {};
  shown_ = int(index);
  const std::string ir_before = doc_->passIrBefore(index), ir_after = doc_->passIrAfter(index);
  auto b = driver::parsePassGraph(ir_before, where + " (before)");
  auto a = driver::parsePassGraph(ir_after, where + " (after)");
  if (!b || !a) {
    headline_->setText(QString::fromStdString((!b ? b.error() : a.error()).message));
    ir_diff_->clear();
    return false;
  }
  before_graph_ = std::move(*b);
  after_graph_ = std::move(*a);
  diff_ = driver::diffPassGraphs(*before_graph_, *after_graph_);
  reveal_tries_ = 2;
  headline_->setText(
      QString("<b>%1</b>: %2 nodes before, %3 after; <span style='color:%4'>%5 added</span>, "
              "<span style='color:%6'>%7 removed</span>, <span style='color:%8'>%9 changed</span>. "
              "A click selects a node's counterpart on the other side; double-click opens a folded scope.")
          .arg(QString::fromStdString(name))
          .arg(before_graph_->keys.size())
          .arg(after_graph_->keys.size())
          .arg(kAdded.name())
          .arg(diff_.added)
          .arg(kRemoved.name())
          .arg(diff_.removed)
          .arg(kChanged.name())
          .arg(diff_.changed));
  before_->setNodeColour(fillOf(&before_graph_->graph, &diff_.before));
  after_->setNodeColour(fillOf(&after_graph_->graph, &diff_.after));
  before_->setGraph(&before_graph_->graph);
  after_->setGraph(&after_graph_->graph);
  before_->setMarks(marksOf(diff_.before));
  after_->setMarks(marksOf(diff_.after));
  const std::string text = driver::unifiedDiff(ir_before, ir_after);
  ir_diff_->setPlainText(text.empty() ? QString("(the pass changed nothing)") : QString::fromStdString(text));
  // Keep the table's selection on the pass shown.
  QSignalBlocker block(table());
  for (int r = 0; r < table()->rowCount(); ++r)
    if (table()->item(r, 0)->data(Qt::UserRole).toInt() == int(index)) table()->selectRow(r);
  return true;
}

void PassesView::waitForLayout() {
  // A drawn side may start another layout (opening the first change's scopes).
  do {
    before_->waitForLayout();
    after_->waitForLayout();
  } while (before_->layoutRunning() || after_->layoutRunning());
}

}  // namespace kiln::studio
