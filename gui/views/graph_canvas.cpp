#include "gui/views/graph_canvas.h"

#include <QGraphicsRectItem>
#include <QGraphicsSimpleTextItem>
#include <QHBoxLayout>
#include <QMouseEvent>
#include <QTimer>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <QtConcurrent/QtConcurrent>
#include <algorithm>
#include <map>
#include <sstream>

#include "core/graphviz/render.h"

namespace kiln::studio {
namespace {

constexpr double kPointsPerInch = 72;
const QColor kFoldFill(0xdd, 0xe3, 0xea);

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

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

/// What a box says: a node's op and first result type; a folded scope's
/// path, part and size.
std::string labelOf(const driver::FoldedGraph::Item& item, const Node* node) {
  if (item.node >= 0) return node->op() + (node->numOutputs() ? "\\n" + node->output()->type().str() : "");
  return item.scope + (item.split ? (item.backward ? " (backward)" : " (forward)") : "") + "\\n" +
         std::to_string(item.members) + " nodes";
}

}  // namespace

std::string foldedDot(const driver::FoldedGraph& f, const std::vector<const Node*>& nodes) {
  auto declare = [&](size_t i) {
    const driver::FoldedGraph::Item& it = f.items[i];
    std::string s = "i";
    s += std::to_string(i);
    s += " [label=\"";
    s += escape(labelOf(it, it.node >= 0 ? nodes[size_t(it.node)] : nullptr));
    s += it.node < 0 ? "\", penwidth=2];" : "\"];";
    return s;
  };
  // nslimit/nslimit1 cap dot's network-simplex passes and mclimit its
  // crossing minimization: a near-optimal ranking instead of the best one.
  // With the clusters below, GPT-2-small's whole step (982 boxes) lays out
  // in 0.4 s, where plain dot did not finish within 11 minutes
  // (benchmarks/studio_layout_bench.cpp).
  std::string dot =
      "digraph g {\n  rankdir=TB;\n  nslimit=2;\n  nslimit1=2;\n  mclimit=0.1;\n"
      "  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  // A cluster per scope and part: a module's forward nodes and its
  // backward ones sit at opposite ends of the step, one cluster holding
  // both would stretch across it and set the layers side by side.
  std::map<std::pair<std::string, bool>, std::vector<size_t>> clusters;
  for (size_t i = 0; i < f.items.size(); ++i) {
    if (f.items[i].node >= 0 && !f.items[i].scope.empty())
      clusters[{f.items[i].scope, f.items[i].backward}].push_back(i);
    else
      dot += "  " + declare(i) + "\n";
  }
  int c = 0;
  for (const auto& [key, items] : clusters) {
    dot += "  subgraph cluster_" + std::to_string(c++) + " {\n    label=\"" + escape(key.first) + "\";\n";
    for (size_t i : items) dot += "    " + declare(i) + "\n";
    dot += "  }\n";
  }
  for (const auto& [from, to] : f.edges) dot += "  i" + std::to_string(from) + " -> i" + std::to_string(to) + ";\n";
  return dot + "}\n";
}

namespace {

/// Zoom with the wheel, pan by dragging; double-click reports the item;
/// keys go to on_key first (true: handled), else scroll as usual.
class ZoomView : public QGraphicsView {
 public:
  using QGraphicsView::QGraphicsView;
  std::function<void(int item)> on_double_click;
  std::function<bool(QKeyEvent*)> on_key;

 protected:
  void keyPressEvent(QKeyEvent* e) override {
    if (!on_key || !on_key(e)) QGraphicsView::keyPressEvent(e);
  }
  void wheelEvent(QWheelEvent* e) override {
    const double f = e->angleDelta().y() > 0 ? 1.2 : 1 / 1.2;
    scale(f, f);
  }
  void mouseDoubleClickEvent(QMouseEvent* e) override {
    for (QGraphicsItem* it = itemAt(e->pos()); it; it = it->parentItem())
      if (it->data(0).isValid()) {
        if (on_double_click) on_double_click(it->data(0).toInt());
        return;
      }
    QGraphicsView::mouseDoubleClickEvent(e);
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

GraphCanvas::GraphCanvas(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  scene_ = new QGraphicsScene(this);
  auto* view = new ZoomView(scene_, this);
  view_ = view;
  view_->setDragMode(QGraphicsView::ScrollHandDrag);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setBackgroundBrush(Qt::white);
  layout->addWidget(view_, 1);
  auto* bar = new QHBoxLayout;
  status_ = new QLabel(this);
  cancel_ = new QPushButton("Cancel layout", this);
  cancel_->setVisible(false);
  bar->addWidget(status_, 1);
  bar->addWidget(cancel_);
  layout->addLayout(bar);
  watcher_ = new QFutureWatcher<GraphLayout>(this);
  // Graphviz reports no progress: the status counts the seconds instead.
  ticker_ = new QTimer(this);
  ticker_->setInterval(500);
  connect(ticker_, &QTimer::timeout, this, [this] {
    if (!watcher_->isRunning()) return ticker_->stop();
    setStatus(QString("laying out %1 boxes (%2 nodes)... %3 s")
                  .arg(folded_.items.size())
                  .arg(nodes_.size())
                  .arg(layout_clock_.elapsed() / 1000.0, 0, 'f', 1));
  });
  connect(cancel_, &QPushButton::clicked, this, [this] { cancelLayout(); });
  view->on_double_click = [this](int item) {
    if (item < 0 || item >= int(folded_.items.size())) return;
    const driver::FoldedGraph::Item& it = folded_.items[size_t(item)];
    if (it.node < 0)
      openScope(it.scope);
    else if (!it.scope.empty())
      closeScope(it.scope);
  };
  view->on_key = [this](QKeyEvent* e) { return navigate(e->key()); };
  connect(scene_, &QGraphicsScene::selectionChanged, this, [this] {
    const auto items = scene_->selectedItems();
    if (items.isEmpty()) return;
    const int item = items.front()->data(0).toInt();
    if (item < 0 || item >= int(folded_.items.size())) return;
    // A folded scope stands for its first node.
    int node = folded_.items[size_t(item)].node;
    for (size_t i = 0; node < 0 && i < folded_.item_of_node.size(); ++i)
      if (folded_.item_of_node[i] == item) node = int(i);
    selected_ = node;
    if (on_selected) on_selected(node);
  });
}

void GraphCanvas::setStatus(const QString& s) {
  status_->setText(s);
  if (on_status) on_status(s);
}

void GraphCanvas::setGraph(const Graph* g) {
  graph_ = g;
  nodes_.clear();
  if (g)
    for (const auto& n : g->nodes()) nodes_.push_back(n.get());
  marks_.clear();
  values_.clear();
  selected_ = pending_select_ = -1;
  open_ = !g ? std::set<std::string>{} : g->numNodes() <= kFoldAbove ? driver::allScopes(*g) : driver::defaultOpenScopes(*g, kMaxItems);
  relayout();
}

void GraphCanvas::setNodeColour(std::function<QColor(int)> colour) {
  colour_ = std::move(colour);
}

void GraphCanvas::setNodeValues(std::vector<double> values, bool max_for_folds) {
  values_ = std::move(values);
  max_for_folds_ = max_for_folds;
  computeItemValues();
  recolour();
}

void GraphCanvas::computeItemValues() {
  item_values_.assign(values_.empty() ? 0 : folded_.items.size(), 0.0);
  max_item_value_ = 0;
  if (values_.empty()) return;
  for (size_t n = 0; n < folded_.item_of_node.size() && n < values_.size(); ++n) {
    const int item = folded_.item_of_node[n];
    if (item < 0 || size_t(item) >= item_values_.size()) continue;
    double& v = item_values_[size_t(item)];
    v = max_for_folds_ ? std::max(v, values_[n]) : v + values_[n];
  }
  for (double v : item_values_) max_item_value_ = std::max(max_item_value_, v);
}

void GraphCanvas::setMarks(std::vector<QColor> marks) {
  marks_ = std::move(marks);
  recolour();
}

void GraphCanvas::openScope(const std::string& scope) {
  open_.insert(scope);
  relayout();
}

void GraphCanvas::closeScope(const std::string& scope) {
  // The scope and everything inside it.
  for (auto it = open_.begin(); it != open_.end();)
    it = (*it == scope || it->rfind(scope + ".", 0) == 0) ? open_.erase(it) : std::next(it);
  relayout();
}

void GraphCanvas::relayout() {
  ++generation_;
  scene_->clear();
  item_boxes_.clear();
  if (!graph_) {
    folded_ = {};
    cancel_->setVisible(false);
    setStatus("");
    return;
  }
  folded_ = driver::foldGraph(*graph_, open_);
  computeItemValues();
  setStatus(QString("laying out %1 boxes (%2 nodes)...").arg(folded_.items.size()).arg(nodes_.size()));
  cancel_->setVisible(true);
  layout_clock_.start();
  ticker_->start();
  const std::string dot = foldedDot(folded_, nodes_);
  const int generation = generation_;
  running_generation_ = generation;
  disconnect(watcher_, nullptr, this, nullptr);
  connect(watcher_, &QFutureWatcher<GraphLayout>::finished, this,
          [this, generation] { showLayout(watcher_->result(), generation); });
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

void GraphCanvas::waitForLayout() {
  watcher_->waitForFinished();
  // Draw the result here instead of waiting for the watcher's finished():
  // the worker thread posts that signal only after the future is marked
  // finished, so an event loop run right now may not see it yet (a test
  // then found nothing drawn on a busy machine). When the signal comes, it
  // finds this generation drawn and does nothing.
  if (running_generation_ >= 0 && running_generation_ == generation_ && watcher_->isFinished() &&
      !watcher_->isCanceled())
    showLayout(watcher_->result(), running_generation_);
}

void GraphCanvas::cancelLayout() {
  if (!watcher_->isRunning()) return;
  ++generation_;  // Graphviz cannot stop: its result is dropped
  ticker_->stop();
  cancel_->setVisible(false);
  setStatus("layout cancelled");
}

QColor GraphCanvas::fillOf(size_t item) const {
  if (!values_.empty()) {  // white (none) to red (the largest drawn box)
    const double t = max_item_value_ > 0 ? std::clamp(itemValue(item) / max_item_value_, 0.0, 1.0) : 0.0;
    return QColor::fromRgbF(1.0 - 0.16 * t, 1.0 - 0.85 * t, 1.0 - 0.84 * t);
  }
  const driver::FoldedGraph::Item& it = folded_.items[item];
  if (it.node < 0 || !colour_) return it.node < 0 ? kFoldFill : QColor(0xee, 0xee, 0xee);
  return colour_(it.node);
}

void GraphCanvas::showLayout(const GraphLayout& layout, int generation) {
  if (generation != generation_ || generation == shown_generation_) return;
  shown_generation_ = generation;
  ticker_->stop();
  cancel_->setVisible(false);
  if (!layout.error.isEmpty()) {
    setStatus(layout.error);
    return;
  }
  item_boxes_.assign(folded_.items.size(), nullptr);
  const size_t folds = size_t(std::count_if(folded_.items.begin(), folded_.items.end(),
                                            [](const driver::FoldedGraph::Item& it) { return it.node < 0; }));
  QPen edge_pen(QColor(0x80, 0x80, 0x80));
  for (const QPolygonF& e : layout.edges) {
    if (e.isEmpty()) continue;
    QPainterPath path;
    path.moveTo(e.front());
    for (int k = 1; k + 2 < e.size(); k += 3) path.cubicTo(e[k], e[k + 1], e[k + 2]);
    scene_->addPath(path, edge_pen);
  }
  QFont font("monospace");
  font.setPointSizeF(8);
  for (const GraphLayout::Box& b : layout.boxes) {
    const int item = b.id.startsWith('i') ? b.id.mid(1).toInt() : -1;
    if (item < 0 || item >= int(folded_.items.size())) continue;
    const bool fold = folded_.items[size_t(item)].node < 0;
    auto* box = scene_->addRect(b.rect, QPen(Qt::black, fold ? 2 : 1), fillOf(size_t(item)));
    box->setData(0, item);
    box->setFlag(QGraphicsItem::ItemIsSelectable);
    box->setToolTip(QString::fromStdString(folded_.items[size_t(item)].scope) +
                    (fold ? "\ndouble-click to open" : "\ndouble-click to fold this scope"));
    item_boxes_[size_t(item)] = box;
    // A node shows its op; a folded scope its path and size.
    auto* text =
        new QGraphicsSimpleTextItem(fold ? QString(b.label).replace("\\n", "\n") : b.label.section("\\n", 0, 0), box);
    text->setFont(font);
    text->setPos(b.rect.center() - text->boundingRect().center());
  }
  // The scopes whose nodes are drawn alone, framed (dot kept each one's
  // nodes together in a cluster, room for the name above them).
  std::map<std::pair<std::string, bool>, QRectF> frames;
  for (size_t i = 0; i < item_boxes_.size(); ++i)
    if (item_boxes_[i] && folded_.items[i].node >= 0 && !folded_.items[i].scope.empty()) {
      QRectF& r = frames[{folded_.items[i].scope, folded_.items[i].backward}];
      r = r.isNull() ? item_boxes_[i]->rect() : r.united(item_boxes_[i]->rect());
    }
  for (const auto& [key, rect] : frames) {
    const QRectF r = rect.adjusted(-6, -18, 6, 6);
    auto* frame = scene_->addRect(r, QPen(QColor(0xb0, 0xb8, 0xc4), 1, Qt::DashLine), QColor(0xf6, 0xf8, 0xfb));
    frame->setZValue(-1);
    const bool both = frames.count({key.first, !key.second}) > 0;
    auto* name = new QGraphicsSimpleTextItem(
        QString::fromStdString(key.first) + (both ? (key.second ? " (backward)" : " (forward)") : ""), frame);
    name->setFont(font);
    name->setBrush(QColor(0x60, 0x68, 0x74));
    name->setPos(r.topLeft() + QPointF(4, 2));
  }
  recolour();
  setStatus(QString("%1 nodes").arg(nodes_.size()) +
            (folds ? QString(" in %1 boxes; %2 scopes folded (double-click opens)").arg(item_boxes_.size()).arg(folds)
                   : QString()));
  if (!showFirstMark()) showOverview();
  if (pending_select_ >= 0) {
    const int node = pending_select_;
    pending_select_ = -1;
    select(node);
  } else if (selected_ >= 0) {
    select(selected_);
  }
  if (on_laid_out) on_laid_out();
}

void GraphCanvas::recolour() {
  for (size_t i = 0; i < item_boxes_.size(); ++i) {
    QGraphicsRectItem* box = item_boxes_[i];
    if (!box) continue;
    box->setBrush(fillOf(i));
    const bool fold = folded_.items[i].node < 0;
    QPen pen(Qt::black, fold ? 2 : 1);
    // The mark of the node, or of a folded scope's first marked member.
    for (size_t n = 0; n < marks_.size() && n < folded_.item_of_node.size(); ++n)
      if (folded_.item_of_node[n] == int(i) && marks_[n].isValid()) {
        pen = QPen(marks_[n], 4);
        break;
      }
    box->setPen(pen);
  }
}

size_t GraphCanvas::drawnNodes() const {
  size_t n = 0;
  for (size_t i = 0; i < item_boxes_.size(); ++i) n += item_boxes_[i] && folded_.items[i].node >= 0;
  return n;
}

bool GraphCanvas::navigate(int key) {
  if (selected_ < 0 || selected_ >= int(nodes_.size())) return false;
  const Node& n = *nodes_[size_t(selected_)];
  int next = -1;
  if (key == Qt::Key_Left || key == Qt::Key_Right) {
    next = selected_ + (key == Qt::Key_Right ? 1 : -1);
  } else if (key == Qt::Key_Up) {  // what made its first input that a node made
    for (const Value* v : n.inputs())
      if (const Node* p = v->producer()) {
        next = int(std::find(nodes_.begin(), nodes_.end(), p) - nodes_.begin());
        break;
      }
  } else if (key == Qt::Key_Down) {  // the first node reading one of its outputs
    for (size_t i = size_t(selected_) + 1; i < nodes_.size() && next < 0; ++i)
      for (const Value* v : nodes_[i]->inputs())
        if (v->producer() == &n) {
          next = int(i);
          break;
        }
  } else if (key == Qt::Key_Return || key == Qt::Key_Enter) {  // open or fold, as a double click
    const int item = folded_.item_of_node[size_t(selected_)];
    const driver::FoldedGraph::Item& it = folded_.items[size_t(item)];
    if (it.node < 0)
      select(selected_, /*reveal=*/true);
    else if (!it.scope.empty())
      closeScope(it.scope);
    return true;
  } else {
    return false;
  }
  if (next < 0 || next >= int(nodes_.size())) return true;  // nothing that way: stay
  select(next, /*reveal=*/true);
  if (on_selected) on_selected(next);
  return true;
}

void GraphCanvas::select(int node, bool reveal) {
  selected_ = node;
  if (node < 0 || node >= int(nodes_.size())) return;
  const int item = folded_.item_of_node[size_t(node)];
  if (reveal && folded_.items[size_t(item)].node < 0) {
    // Open every scope around the node, then select it once drawn.
    const std::string& scope = nodes_[size_t(node)]->scope();
    for (size_t dot = scope.find('.'); dot != std::string::npos; dot = scope.find('.', dot + 1))
      open_.insert(scope.substr(0, dot));
    open_.insert(scope);
    pending_select_ = node;
    relayout();
    return;
  }
  if (layoutRunning()) {
    pending_select_ = node;
    return;
  }
  if (item < int(item_boxes_.size()) && item_boxes_[size_t(item)]) {
    QSignalBlocker block(scene_);
    scene_->clearSelection();
    item_boxes_[size_t(item)]->setSelected(true);
    view_->centerOn(item_boxes_[size_t(item)]);
  }
}

bool GraphCanvas::showFirstMark() {
  for (size_t n = 0; n < marks_.size() && n < folded_.item_of_node.size(); ++n) {
    const int item = folded_.item_of_node[n];
    if (!marks_[n].isValid() || item >= int(item_boxes_.size()) || !item_boxes_[size_t(item)]) continue;
    view_->resetTransform();
    view_->scale(0.8, 0.8);  // readable, with some of the graph around
    view_->centerOn(item_boxes_[size_t(item)]);
    return true;
  }
  return false;
}

void GraphCanvas::showOverview() {
  fit();
  constexpr double kMinScale = 0.33;  // below it the boxes' text cannot be read
  if (view_->transform().m11() >= kMinScale) return;
  // The start of the step at that scale: the topmost box, near the top.
  const QGraphicsRectItem* top = nullptr;
  for (const QGraphicsRectItem* box : item_boxes_)
    if (box && (!top || box->rect().top() < top->rect().top())) top = box;
  if (!top) return;
  view_->resetTransform();
  view_->scale(kMinScale, kMinScale);
  const double half_height = view_->viewport()->height() / (2 * kMinScale);
  view_->centerOn(QPointF(top->rect().center().x(), top->rect().top() - 20 + half_height));
}

void GraphCanvas::fit() {
  view_->fitInView(scene_->itemsBoundingRect(), Qt::KeepAspectRatio);
}

}  // namespace kiln::studio
