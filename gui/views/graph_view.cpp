#include "gui/views/graph_view.h"

#include <QGraphicsRectItem>
#include <QGraphicsSimpleTextItem>
#include <QHBoxLayout>
#include <QSplitter>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <QtConcurrent/QtConcurrent>
#include <map>
#include <sstream>

#include "core/graph_cost.h"
#include "core/graph_dot.h"
#include "core/graphviz/render.h"
#include "core/op_table.h"

namespace kiln::studio {
namespace {

constexpr double kPointsPerInch = 72;

/// Tokens of one "plain" line: words, or "quoted strings" with \" escapes.
std::vector<std::string> tokens(const std::string& line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    std::string t;
    if (line[i] == '"') {
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        t += line[i];
      }
      ++i;
    } else {
      while (i < line.size() && line[i] != ' ') t += line[i++];
    }
    out.push_back(t);
  }
  return out;
}

QColor colorFor(const Node& n) {
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

/// Zoom with the wheel, pan by dragging.
class ZoomView : public QGraphicsView {
 public:
  using QGraphicsView::QGraphicsView;

 protected:
  void wheelEvent(QWheelEvent* e) override {
    const double f = e->angleDelta().y() > 0 ? 1.2 : 1 / 1.2;
    scale(f, f);
  }
};

}  // namespace

GraphLayout parsePlainLayout(const std::string& plain) {
  GraphLayout out;
  std::istringstream in(plain);
  std::string line;
  double height = 0;
  while (std::getline(in, line)) {
    const std::vector<std::string> t = tokens(line);
    if (t.empty()) continue;
    if (t[0] == "graph" && t.size() >= 4) height = std::stod(t[3]);
    if (t[0] == "node" && t.size() >= 7) {
      const double x = std::stod(t[2]), y = height - std::stod(t[3]), w = std::stod(t[4]), h = std::stod(t[5]);
      out.boxes.push_back(
          {QString::fromStdString(t[1]),
           QRectF((x - w / 2) * kPointsPerInch, (y - h / 2) * kPointsPerInch, w * kPointsPerInch, h * kPointsPerInch),
           QString::fromStdString(t[6])});
    }
    if (t[0] == "edge" && t.size() >= 4) {
      const size_t n = std::stoul(t[3]);
      QPolygonF poly;
      for (size_t k = 0; k < n && 5 + 2 * k < t.size(); ++k)
        poly << QPointF(std::stod(t[4 + 2 * k]) * kPointsPerInch, (height - std::stod(t[5 + 2 * k])) * kPointsPerInch);
      out.edges.push_back(poly);
    }
  }
  return out;
}

GraphView::GraphView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  find_ = new QLineEdit(this);
  find_->setPlaceholderText("find by op, scope, value name or type (Enter: next)");
  status_ = new QLabel(this);
  colouring_ = new QComboBox(this);
  colouring_->addItems({"colour by op kind", "colour by dialect"});
  bar->addWidget(find_, 1);
  cancel_ = new QPushButton("Cancel layout", this);
  cancel_->setVisible(false);
  bar->addWidget(colouring_);
  bar->addWidget(status_);
  bar->addWidget(cancel_);
  connect(cancel_, &QPushButton::clicked, this, [this] { cancelLayout(); });
  layout->addLayout(bar);
  auto* split = new QSplitter(this);
  scene_ = new QGraphicsScene(this);
  view_ = new ZoomView(scene_, split);
  view_->setDragMode(QGraphicsView::ScrollHandDrag);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setBackgroundBrush(Qt::white);
  details_ = new QTextEdit(split);
  details_->setReadOnly(true);
  split->addWidget(view_);
  split->addWidget(details_);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  split->setSizes({1100, 300});  // the graph gets the room, the details a column
  layout->addWidget(split, 1);
  watcher_ = new QFutureWatcher<GraphLayout>(this);
  connect(watcher_, &QFutureWatcher<GraphLayout>::finished, this, [this] { showLayout(watcher_->result()); });
  connect(find_, &QLineEdit::returnPressed, this, [this] { findNext(find_->text()); });
  connect(colouring_, &QComboBox::currentIndexChanged, this, [this](int i) { colourByDialect(i == 1); });
  connect(scene_, &QGraphicsScene::selectionChanged, this, [this] {
    const auto items = scene_->selectedItems();
    if (!items.isEmpty()) select(items.front()->data(0).toInt());
  });
}

void GraphView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  scene_->clear();
  node_items_.clear();
  selected_ = -1;
  details_->clear();
  if (!doc_ || !doc_->graph()) {
    status_->setText(doc_ ? "this report carries no graph (graph.ir)" : "");
    return;
  }
  const Graph* g = doc_->graph();
  status_->setText(QString("laying out %1 nodes...").arg(g->numNodes()));
  cancelled_ = false;
  cancel_->setVisible(true);
  const std::string dot = graphToDot(*g, /*inputs_and_outputs=*/false);
  watcher_->setFuture(QtConcurrent::run([dot] {
    auto plain = renderDot(dot, "plain");
    if (!plain) {
      GraphLayout l;
      l.error = QString::fromStdString(plain.error().message);
      return l;
    }
    return parsePlainLayout(*plain);
  }));
}

void GraphView::waitForLayout() {
  if (watcher_->isRunning()) {
    watcher_->waitForFinished();
    QCoreApplication::processEvents();  // deliver finished()
  }
}

void GraphView::cancelLayout() {
  if (!watcher_->isRunning()) return;
  cancelled_ = true;
  cancel_->setVisible(false);
  status_->setText("layout cancelled");
}

void GraphView::showLayout(const GraphLayout& layout) {
  cancel_->setVisible(false);
  if (cancelled_) return;
  if (!layout.error.isEmpty()) {
    status_->setText(layout.error);
    return;
  }
  const Graph* g = doc_ ? doc_->graph() : nullptr;
  if (!g) return;
  std::vector<const Node*> nodes;
  for (const auto& n : g->nodes()) nodes.push_back(n.get());
  node_items_.assign(nodes.size(), nullptr);
  QPen edge_pen(QColor(0x80, 0x80, 0x80));
  for (const QPolygonF& e : layout.edges) {
    QPainterPath path;
    if (e.isEmpty()) continue;
    path.moveTo(e.front());
    for (int k = 1; k + 2 < e.size(); k += 3) path.cubicTo(e[k], e[k + 1], e[k + 2]);
    scene_->addPath(path, edge_pen);
  }
  for (const GraphLayout::Box& b : layout.boxes) {
    const bool is_node = b.id.startsWith('n');
    const int index = is_node ? b.id.mid(1).toInt() : -1;
    auto* box = scene_->addRect(
        b.rect, QPen(Qt::black),
        is_node && index < int(nodes.size()) ? colorFor(*nodes[size_t(index)]) : QColor(0xee, 0xee, 0xee));
    box->setData(0, index);
    if (is_node && index >= 0 && index < int(nodes.size())) {
      box->setFlag(QGraphicsItem::ItemIsSelectable);
      node_items_[size_t(index)] = box;
    }
    auto* text = scene_->addSimpleText(b.label.section("\\n", 0, 0));
    text->setPos(b.rect.center() - text->boundingRect().center());
    text->setParentItem(box);
  }
  status_->setText(QString("%1 nodes").arg(nodes.size()));
  fit();
}

void GraphView::colourByDialect(bool by_dialect) {
  if (colouring_->currentIndex() != (by_dialect ? 1 : 0)) {
    colouring_->setCurrentIndex(by_dialect ? 1 : 0);  // comes back here through the signal
    return;
  }
  const Graph* g = doc_ ? doc_->graph() : nullptr;
  if (!g) return;
  const nlohmann::json kernels = doc_->report().value("kernels", nlohmann::json::array());
  // A fixed colour per dialect, in the order the dialects first appear.
  static const QColor palette[] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0xe1, 0x57, 0x59),
                                   QColor(0x76, 0xb7, 0xb2), QColor(0x59, 0xa1, 0x4f), QColor(0xed, 0xc9, 0x48),
                                   QColor(0xb0, 0x7a, 0xa1), QColor(0xff, 0x9d, 0xa7)};
  std::map<std::string, QColor> dialects;
  size_t k = 0;
  for (const auto& n : g->nodes()) {
    if (k >= node_items_.size()) break;
    auto* box = dynamic_cast<QGraphicsRectItem*>(node_items_[k]);
    if (box) {
      QColor c = colorFor(*n);
      if (by_dialect) {
        const std::string d = k < kernels.size() ? kernels[k].value("dialect", "?") : "?";
        auto it = dialects.find(d);
        if (it == dialects.end()) it = dialects.emplace(d, palette[dialects.size() % 8]).first;
        c = it->second;
      }
      box->setBrush(c);
    }
    ++k;
  }
  QString legend;
  for (const auto& [d, c] : dialects) legend += QString::fromStdString(d) + " ";
  status_->setText(QString("%1 nodes").arg(g->numNodes()) + (by_dialect ? "; dialects: " + legend.trimmed() : ""));
}

void GraphView::fit() {
  view_->fitInView(scene_->itemsBoundingRect(), Qt::KeepAspectRatio);
}

int GraphView::findNext(const QString& text) {
  const Graph* g = doc_ ? doc_->graph() : nullptr;
  if (!g || text.isEmpty()) return -1;
  std::vector<const Node*> nodes;
  for (const auto& n : g->nodes()) nodes.push_back(n.get());
  const std::string needle = text.toStdString();
  for (size_t step = 1; step <= nodes.size(); ++step) {
    const size_t i = (size_t(std::max(selected_, -1) + 1) + step - 1) % nodes.size();
    const Node& n = *nodes[i];
    bool hit = n.op().find(needle) != std::string::npos || n.scope().find(needle) != std::string::npos;
    for (const Value* v : n.outputs())
      hit = hit || v->name().find(needle) != std::string::npos || v->type().str().find(needle) != std::string::npos;
    if (!hit) continue;
    select(int(i));
    return int(i);
  }
  status_->setText("no node matches '" + text + "'");
  return -1;
}

void GraphView::select(int node) {
  if (node < 0 || node >= int(node_items_.size())) {
    selected_ = node;
    details_->setPlainText(describe(node));
    return;
  }
  selected_ = node;
  if (QGraphicsItem* item = node_items_[size_t(node)]) {
    QSignalBlocker block(scene_);
    scene_->clearSelection();
    item->setSelected(true);
    view_->centerOn(item);
  }
  details_->setPlainText(describe(node));
}

QString GraphView::describe(int node) const {
  const Graph* g = doc_ ? doc_->graph() : nullptr;
  if (!g || node < 0) return {};
  const Node* n = nullptr;
  int k = 0;
  for (const auto& m : g->nodes())
    if (k++ == node) n = m.get();
  if (!n) return {};
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
  const nlohmann::json kernels = doc_->report().value("kernels", nlohmann::json::array());
  if (node < int(kernels.size())) s += "kernel: " + kernels[size_t(node)].value("kernel", "") + "\n";
  return QString::fromStdString(s);
}

}  // namespace kiln::studio
