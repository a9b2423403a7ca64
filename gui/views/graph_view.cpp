#include "gui/views/graph_view.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QSplitter>
#include <QVBoxLayout>
#include <map>

#include "core/graph_cost.h"
#include "core/op_table.h"
#include "driver/messages.h"

namespace kiln::studio {
namespace {

/// Enter finds the next match, Shift+Enter the previous one.
class FindEdit : public QLineEdit {
 public:
  using QLineEdit::QLineEdit;
  std::function<void(bool backwards)> on_find;

 protected:
  void keyPressEvent(QKeyEvent* e) override {
    if ((e->key() == Qt::Key_Return || e->key() == Qt::Key_Enter) && on_find) {
      on_find(e->modifiers() & Qt::ShiftModifier);
      return;
    }
    QLineEdit::keyPressEvent(e);
  }
};

}  // namespace

QColor opKindColour(const Node& n) {
  const std::string& op = n.op();
  if (n.def().has(kCollective)) return QColor(0xe1, 0x57, 0x59);
  if (op.find("_update") != std::string::npos || op == "global_norm") return QColor(0xb0, 0x7a, 0xa1);
  if (op == "matmul" || op == "linear" || op.rfind("conv2d", 0) == 0) return QColor(0x4e, 0x79, 0xa7);
  if (op.rfind("fused_", 0) == 0) return QColor(0x59, 0xa1, 0x4f);
  if (n.def().has(kReduction)) return QColor(0xf2, 0x8e, 0x2b);
  if (n.def().has(kView)) return QColor(0xbb, 0xbb, 0xbb);
  if (n.def().has(kElementwise)) return QColor(0x76, 0xb7, 0xb2);
  return QColor(0xed, 0xc9, 0x48);
}

GraphView::GraphView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto* find = new FindEdit(this);
  find_ = find;
  find_->setPlaceholderText("find by op, scope, value name or type (Enter: next, Shift+Enter: previous)");
  colouring_ = new QComboBox(this);
  // In Colouring's order.
  colouring_->addItems({"colour by op kind", "colour by dialect", "colour by measured time", "colour by flops",
                        "colour by bytes moved", "colour by memory at the node"});
  colouring_->setToolTip(
      "Metrics go from white to red, the reddest being the largest box drawn; a folded scope shows the sum of its "
      "nodes (memory: their maximum), so the heaviest scope stands out.");
  legend_ = new QLabel(this);
  bar->addWidget(find_, 1);
  bar->addWidget(colouring_);
  bar->addWidget(legend_);
  layout->addLayout(bar);
  auto* split = new QSplitter(this);
  canvas_ = new GraphCanvas(split);
  details_ = new QTextEdit(split);
  details_->setReadOnly(true);
  split->addWidget(canvas_);
  split->addWidget(details_);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  split->setSizes({1100, 300});  // the graph gets the room, the details a column
  layout->addWidget(split, 1);
  find->on_find = [this](bool backwards) { findNext(find_->text(), backwards); };
  connect(colouring_, &QComboBox::currentIndexChanged, this, [this](int i) { colourBy(Colouring(i)); });
  canvas_->on_selected = [this](int node) {
    selected_ = node;
    details_->setPlainText(describe(node));
  };
  canvas_->setNodeColour([this](int node) {
    return node >= 0 && node < int(nodes_.size()) ? opKindColour(*nodes_[size_t(node)]) : QColor(Qt::white);
  });
  // Opening or folding a scope changes the boxes, so the scale's top: the
  // legend follows.
  canvas_->on_laid_out = [this] {
    const Colouring c = colouring();
    if (c != Colouring::OpKind && c != Colouring::Dialect && doc_ && canvas_->maxItemValue() > 0)
      legend_->setText(metricLegend(c));
  };
}

void GraphView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  nodes_.clear();
  selected_ = -1;
  details_->clear();
  legend_->clear();
  const Graph* g = doc_ ? doc_->graph() : nullptr;
  if (g)
    for (const auto& n : g->nodes()) nodes_.push_back(n.get());
  canvas_->setGraph(g);
  if (doc_ && !g) details_->setPlainText("this report carries no graph (graph.ir)");
  if (colouring_->currentIndex() != 0) colourBy(colouring());
}

void GraphView::colourBy(Colouring c) {
  if (colouring_->currentIndex() != int(c)) {
    colouring_->setCurrentIndex(int(c));  // comes back here through the signal
    return;
  }
  legend_->clear();
  canvas_->setNodeValues({});
  if (c != Colouring::OpKind && c != Colouring::Dialect && doc_) return colourByMetric(c);
  const bool by_dialect = c == Colouring::Dialect;
  if (!by_dialect || !doc_) {
    canvas_->setNodeColour([this](int node) {
      return node >= 0 && node < int(nodes_.size()) ? opKindColour(*nodes_[size_t(node)]) : QColor(Qt::white);
    });
    canvas_->recolour();
    return;
  }
  const auto& kernels = doc_->kernels();
  // A fixed colour per dialect, in the order the dialects first appear.
  static const QColor palette[] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0xe1, 0x57, 0x59),
                                   QColor(0x76, 0xb7, 0xb2), QColor(0x59, 0xa1, 0x4f), QColor(0xed, 0xc9, 0x48),
                                   QColor(0xb0, 0x7a, 0xa1), QColor(0xff, 0x9d, 0xa7)};
  auto colours = std::make_shared<std::vector<QColor>>();
  std::map<std::string, QColor> dialects;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    const std::string d = k < kernels.size() ? kernels[k].dialect : "?";
    auto it = dialects.find(d);
    if (it == dialects.end()) it = dialects.emplace(d, palette[dialects.size() % 8]).first;
    colours->push_back(it->second);
  }
  canvas_->setNodeColour([colours](int node) {
    return node >= 0 && node < int(colours->size()) ? (*colours)[size_t(node)] : QColor(Qt::white);
  });
  canvas_->recolour();
  QString legend = "dialects: ";
  for (const auto& [d, c] : dialects)
    legend += QString("<span style='background:%1'>&nbsp;%2&nbsp;</span> ").arg(c.name(), QString::fromStdString(d));
  legend_->setText(legend.trimmed());
}

void GraphView::colourByMetric(Colouring c) {
  const auto& kernels = doc_->kernels();
  const auto& timeline = doc_->report().memory.timeline;
  std::vector<double> values(nodes_.size(), 0.0);
  bool known = true;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    switch (c) {
      case Colouring::Time:
        known = known && k < kernels.size() && kernels[k].measured_ms.has_value();
        values[k] = k < kernels.size() ? kernels[k].measured_ms.value_or(0) : 0;
        break;
      case Colouring::Flops:
        values[k] = nodeCost(*nodes_[k]).flops;
        break;
      case Colouring::Bytes:
        values[k] = nodeCost(*nodes_[k]).bytes;
        break;
      default:
        known = known && timeline.size() == nodes_.size();
        values[k] = k < timeline.size() ? double(timeline[k]) : 0;
    }
  }
  if (!known) {
    legend_->setText(c == Colouring::Time ? "no measured times: Run > Measure (Ctrl+R) or kiln train --report"
                                          : "this report's memory timeline does not match its graph");
    return;
  }
  canvas_->setNodeValues(std::move(values), c == Colouring::Memory);
  legend_->setText(metricLegend(c));
}

QString GraphView::metricLegend(Colouring c) const {
  static const std::map<Colouring, std::pair<const char*, const char*>> kWhat{
      {Colouring::Time, {"measured time per step", "ms"}},
      {Colouring::Flops, {"flops", "FLOP"}},
      {Colouring::Bytes, {"bytes read and written", "B"}},
      {Colouring::Memory, {"bytes live while it runs", "B"}}};
  const auto& [what, unit] = kWhat.at(c);
  return QString("%1: white 0 to <span style='background:#d62728;color:white'>&nbsp;%2&nbsp;</span> "
                 "(the largest box%3)")
      .arg(what)
      .arg(QString::fromStdString(driver::formatQuantity(canvas_->maxItemValue(), unit)))
      .arg(c == Colouring::Memory ? "" : "; a folded scope sums its nodes");
}

int GraphView::findNext(const QString& text, bool backwards) {
  if (nodes_.empty() || text.isEmpty()) return -1;
  const std::string needle = text.toStdString();
  const size_t n = nodes_.size();
  for (size_t step = 1; step <= n; ++step) {
    const size_t from = selected_ < 0 ? (backwards ? 0 : n - 1) : size_t(selected_);
    const size_t i = backwards ? (from + n - step) % n : (from + step) % n;
    const Node& node = *nodes_[i];
    bool hit = node.op().find(needle) != std::string::npos || node.scope().find(needle) != std::string::npos;
    for (const Value* v : node.outputs())
      hit = hit || v->name().find(needle) != std::string::npos || v->type().str().find(needle) != std::string::npos;
    if (!hit) continue;
    selected_ = int(i);
    canvas_->select(int(i), /*reveal=*/true);
    details_->setPlainText(describe(int(i)));
    return int(i);
  }
  legend_->setText("no node matches '" + text + "'");
  return -1;
}

void GraphView::select(int node) {
  selected_ = node;
  canvas_->select(node, /*reveal=*/true);
  details_->setPlainText(describe(node));
}

QString GraphView::describe(int node) const {
  if (node < 0 || node >= int(nodes_.size())) return {};
  const Node* n = nodes_[size_t(node)];
  std::string s = "node " + std::to_string(node) + ": " + n->op() + "\n";
  for (const auto& [name, value] : n->attrs()) s += "  " + name + " = " + attrToString(value) + "\n";
  s += "inputs:\n";
  for (const Value* v : n->inputs()) s += "  %" + v->name() + " : " + v->type().str() + "\n";
  s += "outputs:\n";
  for (const Value* v : n->outputs()) s += "  %" + v->name() + " : " + v->type().str() + "\n";
  s += "scope: " + (n->scope().empty() ? std::string("-") : n->scope()) + "\n";
  s += "provenance: " + (n->provenance().empty() ? std::string("-") : n->provenance()) + "\n";
  const Cost c = nodeCost(*n);
  s += "flops: " + std::to_string(static_cast<int64_t>(c.flops)) +
       ", bytes: " + std::to_string(static_cast<int64_t>(c.bytes)) + "\n";
  if (!doc_) return QString::fromStdString(s);
  const auto& kernels = doc_->kernels();
  if (node < int(kernels.size())) s += "kernel: " + kernels[size_t(node)].kernel + "\n";
  return QString::fromStdString(s);
}

}  // namespace kiln::studio
