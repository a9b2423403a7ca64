// The memory view (chart_views.h): report.memory's timeline and tensors.
#include <QComboBox>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QHeaderView>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

#include "driver/messages.h"
#include "gui/views/chart_views.h"
#include "gui/views/table_view.h"

namespace kiln::studio {
namespace {

constexpr size_t kBands = 6;  // largest tensors drawn individually; the rest is one area

QString mb(double b) {
  return QString::fromStdString(kiln::driver::formatQuantity(b, "B"));
}

// One colour per category (memoryCategoryNames' order).
const QColor kCategoryColors[] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0xe1, 0x57, 0x59),
                                  QColor(0x59, 0xa1, 0x4f), QColor(0xba, 0xb0, 0xac), QColor(0xb0, 0x7a, 0xa1),
                                  QColor(0x76, 0xb7, 0xb2), QColor(0xed, 0xc9, 0x48)};
constexpr size_t kCategoryColorCount = sizeof kCategoryColors / sizeof kCategoryColors[0];

const QColor kRematColor(0x9c, 0x27, 0xb0);

const QColor kBandColors[kBands] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0xe1, 0x57, 0x59),
                                    QColor(0x76, 0xb7, 0xb2), QColor(0x59, 0xa1, 0x4f), QColor(0xed, 0xc9, 0x48)};

}  // namespace

MemoryChart::MemoryChart(QWidget* parent) : QWidget(parent) {
  setUpChart(this);
  setMinimumSize(400, 250);
}

void MemoryChart::setMode(Mode m) {
  mode_ = m;
  update();
}

void MemoryChart::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  timeline_.clear();
  bands_.clear();
  category_names_.clear();
  category_lines_.clear();
  peak_ = budget_ = 0;
  remat_nodes_.clear();
  cursor_ = -1;
  if (doc_ && doc_->graph()) {
    int64_t k = 0;
    for (const auto& n : doc_->graph()->nodes()) {
      if (n->provenance().rfind("remat of ", 0) == 0) remat_nodes_.push_back(k);
      ++k;
    }
  }
  if (doc_) {
    const driver::ReportMemory& m = doc_->report().memory;
    for (uint64_t v : m.timeline) timeline_.push_back(double(v));
    // Each category's live bytes per node, counted as the timeline is: a
    // graph input all along, any other tensor from its producer to its
    // last reader. The categories add up to the timeline.
    if (!m.categories.empty()) {
      for (const driver::ReportCategory& c : m.categories) category_names_.push_back(QString::fromStdString(c.name));
      category_lines_.assign(category_names_.size(), std::vector<double>(timeline_.size(), 0));
      for (const driver::ReportTensor& t : m.tensors) {
        const auto it = std::find(category_names_.begin(), category_names_.end(), QString::fromStdString(t.category));
        if (it == category_names_.end()) continue;
        std::vector<double>& line = category_lines_[size_t(it - category_names_.begin())];
        const int64_t first = t.kind == "input" ? 0 : t.first;
        const int64_t last = t.kind == "input" ? int64_t(line.size()) - 1 : t.last;
        for (int64_t i = std::max<int64_t>(first, 0); i <= last && i < int64_t(line.size()); ++i)
          line[size_t(i)] += double(t.bytes);
      }
    }
    peak_ = double(m.peak_bytes);
    peak_node_ = m.peak_node;
    std::vector<Band> all;
    for (const driver::ReportTensor& t : m.tensors) {
      if (t.kind == "input") continue;  // live all along: the floor, not a band
      // Intermediates are mostly unnamed (%12): what makes them names them.
      QString name = QString::fromStdString(t.value);
      if (name.isEmpty()) name = QString::fromStdString(t.producer + " " + t.type);
      all.push_back({name, QString::fromStdString(t.producer), QString::fromStdString(t.scope), t.first, t.last,
                     double(t.bytes), t.rematerialized});
    }
    std::sort(all.begin(), all.end(), [](const Band& a, const Band& b) { return a.bytes > b.bytes; });
    all.resize(std::min(all.size(), kBands));
    bands_ = std::move(all);
    budget_ = double(doc_->report().training.memory_budget);
  }
  update();
}

QRectF MemoryChart::plotArea() const {
  return QRectF(70, 30, std::max(10, width() - 90), std::max(10, height() - 70));
}

void MemoryChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), Qt::white);
  if (timeline_.empty()) {
    p.drawText(rect(), Qt::AlignCenter, doc_ ? "This report has no memory timeline." : "No report open.");
    return;
  }
  const QRectF a = plotArea();
  const double top = std::max({peak_, budget_, *std::max_element(timeline_.begin(), timeline_.end())}) * 1.08;
  const double n = static_cast<double>(timeline_.size());
  std::function<double(double)> x = [&](double i) { return a.left() + a.width() * i / std::max(1.0, n - 1); };
  std::function<double(double)> y = [&](double b) { return a.bottom() - a.height() * b / top; };
  if (mode_ == Mode::Categories && hasCategories())
    paintCategories(p, x, y);
  else
    paintBands(p, x, y);
  // The nodes that recompute a value (--memory-budget), under the axis.
  p.setPen(Qt::NoPen);
  p.setBrush(kRematColor);
  for (int64_t i : remat_nodes_) {
    const double xi = x(double(i));
    p.drawPolygon(
        QPolygonF({QPointF(xi, a.bottom() + 1), QPointF(xi - 4, a.bottom() + 8), QPointF(xi + 4, a.bottom() + 8)}));
  }
  // Axes, peak and budget.
  p.setPen(Qt::black);
  p.setBrush(Qt::NoBrush);
  p.drawRect(a);
  p.drawText(QRectF(0, a.top() - 5, a.left() - 5, 20), Qt::AlignRight, mb(top));
  p.drawText(QRectF(0, a.bottom() - 10, a.left() - 5, 20), Qt::AlignRight, "0");
  p.drawText(QRectF(a.left(), a.bottom() + 10, a.width(), 20), Qt::AlignCenter,
             QString("node (schedule order), %1 nodes").arg(timeline_.size()) +
                 (remat_nodes_.empty() ? QString()
                                       : QString("; \u25b2 %1 recompute a value (remat)").arg(remat_nodes_.size())));
  p.setPen(QPen(Qt::red, 1, Qt::DashLine));
  p.drawLine(QPointF(a.left(), y(peak_)), QPointF(a.right(), y(peak_)));
  p.drawLine(QPointF(x(double(peak_node_)), a.top()), QPointF(x(double(peak_node_)), a.bottom()));
  // The label on whichever side of the peak's line it fits.
  const QString label = QString("peak %1 at node %2 (weights, state and batch included)").arg(mb(peak_)).arg(peak_node_);
  const double px = x(double(peak_node_)), w = p.fontMetrics().horizontalAdvance(label);
  p.drawText(QPointF(px + 4 + w > a.right() ? std::max(a.left() + 4, px - 4 - w) : px + 4, a.top() + 14), label);
  if (cursor_ >= 0 && cursor_ < int(timeline_.size())) {  // the keyboard's cursor
    p.setPen(QPen(QColor(0x33, 0x33, 0x33), 1, Qt::DotLine));
    p.drawLine(QPointF(x(double(cursor_)), a.top()), QPointF(x(double(cursor_)), a.bottom()));
  }
  if (budget_ > 0) {
    p.setPen(QPen(Qt::darkGreen, 1.5));
    p.drawLine(QPointF(a.left(), y(budget_)), QPointF(a.right(), y(budget_)));
    p.drawText(QPointF(a.left() + 4, y(budget_) - 4), QString("budget %1").arg(mb(budget_)));
  }
}

void MemoryChart::paintCategories(QPainter& p, const std::function<double(double)>& x,
                                  const std::function<double(double)>& y) {
  const QRectF a = plotArea();
  const size_t n = timeline_.size();
  std::vector<double> base(n, 0);
  double lx = a.left();
  for (size_t c = 0; c < category_lines_.size(); ++c) {
    const std::vector<double>& line = category_lines_[c];
    if (std::all_of(line.begin(), line.end(), [](double v) { return v == 0; })) continue;
    const QColor colour = kCategoryColors[c % kCategoryColorCount];
    QPolygonF band;
    for (size_t i = 0; i < n; ++i) band << QPointF(x(double(i)), y(base[i] + line[i]));
    for (size_t i = n; i-- > 0;) band << QPointF(x(double(i)), y(base[i]));
    p.setPen(Qt::NoPen);
    p.setBrush(colour);
    p.drawPolygon(band);
    for (size_t i = 0; i < n; ++i) base[i] += line[i];
    // Legend: the category and its bytes at the peak.
    p.fillRect(QRectF(lx, 8, 10, 10), colour);
    p.setPen(Qt::black);
    const QString label =
        category_names_[c] + " " + mb(size_t(peak_node_) < n ? line[size_t(peak_node_)] : 0.0);
    p.drawText(QPointF(lx + 14, 17), label);
    lx += 24 + p.fontMetrics().horizontalAdvance(label);
  }
}

void MemoryChart::paintBands(QPainter& p, const std::function<double(double)>& x,
                             const std::function<double(double)>& y) {
  const QRectF a = plotArea();
  const double n = static_cast<double>(timeline_.size());
  // Total live bytes.
  QPolygonF area;
  area << QPointF(x(0), y(0));
  for (size_t i = 0; i < timeline_.size(); ++i) area << QPointF(x(double(i)), y(timeline_[i]));
  area << QPointF(x(n - 1), y(0));
  p.setPen(Qt::NoPen);
  p.setBrush(QColor(0xd0, 0xd0, 0xd0));
  p.drawPolygon(area);
  // The largest tensors, stacked from the bottom over their lifetimes.
  std::vector<double> base(timeline_.size(), 0);
  for (size_t k = 0; k < bands_.size(); ++k) {
    const Band& b = bands_[k];
    p.setBrush(kBandColors[k]);
    for (int64_t i = std::max<int64_t>(0, b.first); i <= std::min<int64_t>(b.last, int64_t(n) - 1); ++i) {
      const double x0 = x(double(i) - 0.5), x1 = x(double(i) + 0.5);
      p.drawRect(
          QRectF(QPointF(std::max(x0, a.left()), y(base[i] + b.bytes)), QPointF(std::min(x1, a.right()), y(base[i]))));
      if (b.remat) {  // recomputed: hatched over its colour
        p.setBrush(QBrush(Qt::white, Qt::BDiagPattern));
        p.drawRect(QRectF(QPointF(std::max(x0, a.left()), y(base[i] + b.bytes)),
                          QPointF(std::min(x1, a.right()), y(base[i]))));
        p.setBrush(kBandColors[k]);
      }
      base[i] += b.bytes;
    }
  }
  // Legend.
  double lx = a.left();
  for (size_t k = 0; k < bands_.size(); ++k) {
    p.fillRect(QRectF(lx, 8, 10, 10), kBandColors[k]);
    p.setPen(Qt::black);
    const QString label = bands_[k].name + " " + mb(bands_[k].bytes) + (bands_[k].remat ? " (recomputed)" : "");
    p.drawText(QPointF(lx + 14, 17), label);
    lx += 24 + p.fontMetrics().horizontalAdvance(label);
  }
}

int MemoryChart::nodeAt(QPoint pos) const {
  const QRectF a = plotArea();
  if (timeline_.empty() || !a.contains(pos)) return -1;
  const double n = static_cast<double>(timeline_.size());
  const auto i = static_cast<int64_t>(std::lround((pos.x() - a.left()) / a.width() * std::max(1.0, n - 1)));
  return i < 0 || i >= int64_t(n) ? -1 : int(i);
}

void MemoryChart::mousePressEvent(QMouseEvent* e) {
  const int node = nodeAt(e->pos());
  if (node >= 0 && on_node_clicked) on_node_clicked(node);
}

QString MemoryChart::describeAt(QPoint pos) const {
  const int64_t i = nodeAt(pos);
  if (i < 0) return {};
  QString s = QString("node %1: %2 live").arg(i).arg(mb(timeline_[size_t(i)]));
  if (std::binary_search(remat_nodes_.begin(), remat_nodes_.end(), i)) s += " (recomputes a value: remat)";
  if (mode_ == Mode::Categories && hasCategories()) {
    for (size_t c = 0; c < category_lines_.size(); ++c)
      if (category_lines_[c][size_t(i)] > 0) s += "\n" + category_names_[c] + ": " + mb(category_lines_[c][size_t(i)]);
    return s;
  }
  for (const Band& b : bands_)
    if (b.first <= i && i <= b.last)
      s += QString("\n%1 (%2%7), made by %3, scope %4, nodes %5..%6")
               .arg(b.name, mb(b.bytes), b.producer, b.scope.isEmpty() ? "-" : b.scope)
               .arg(b.first)
               .arg(b.last)
               .arg(b.remat ? ", recomputed" : "");
  return s;
}

void MemoryChart::keyPressEvent(QKeyEvent* e) {
  const int n = int(timeline_.size());
  if (n == 0) return QWidget::keyPressEvent(e);
  const int page = std::max(1, n / 20);
  switch (e->key()) {
    case Qt::Key_Left: cursor_ = std::max(0, cursor_ - 1); break;
    case Qt::Key_Right: cursor_ = std::min(n - 1, cursor_ + 1); break;
    case Qt::Key_PageUp: cursor_ = std::max(0, cursor_ - page); break;
    case Qt::Key_PageDown: cursor_ = std::min(n - 1, cursor_ + page); break;
    case Qt::Key_Home: cursor_ = 0; break;
    case Qt::Key_End: cursor_ = n - 1; break;
    case Qt::Key_Return:
    case Qt::Key_Enter:
      if (cursor_ >= 0 && on_node_clicked) on_node_clicked(cursor_);
      return;
    default: return QWidget::keyPressEvent(e);
  }
  update();
  const QRectF a = plotArea();
  const QPoint at(int(a.left() + a.width() * cursor_ / std::max(1.0, double(n - 1))), int(a.center().y()));
  QToolTip::showText(mapToGlobal(at), describeAt(at), this);
}

void MemoryChart::mouseMoveEvent(QMouseEvent* e) {
  const QString s = describeAt(e->pos());
  if (s.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(e->globalPosition().toPoint(), s, this);
}

MemoryView::MemoryView(QWidget* parent) : View(parent) {
  auto* layout = new QHBoxLayout(this);
  chart_ = new MemoryChart(this);
  auto* side = new QVBoxLayout;
  stack_by_ = new QComboBox(this);
  stack_by_->addItems({"stack by category", "largest tensors"});
  stack_by_->setToolTip(
      "By category: parameters, optimizer state, gradients, activations (kept for the backward), temporaries, "
      "communication buffers, batch and outputs, stacked.\nLargest tensors: the six largest as bands over the "
      "total.");
  connect(stack_by_, &QComboBox::currentIndexChanged, this, [this](int i) { showCategories(i == 0); });
  peak_table_ = new QTableWidget(this);
  peak_table_->setColumnCount(3);
  peak_table_->setHorizontalHeaderLabels({"at the peak", "bytes", "share"});
  setHeaderTips(peak_table_,
                {{"at the peak", "what the bytes live at the peak are: parameters (and buffers), optimizer state, "
                                 "gradients, activations kept for the backward, temporaries, communication "
                                 "buffers, the batch, the outputs"},
                 {"bytes", "live at the peak node, by category; they add up to the peak"},
                 {"share", "of the peak"}});
  setUpTable(peak_table_);
  peak_table_->setMinimumWidth(260);
  side->addWidget(stack_by_);
  side->addWidget(peak_table_);
  layout->addWidget(chart_, 1);
  layout->addLayout(side);
}

void MemoryView::showCategories(bool on) {
  chart_->setMode(on ? MemoryChart::Mode::Categories : MemoryChart::Mode::Tensors);
  QSignalBlocker block(stack_by_);
  stack_by_->setCurrentIndex(on ? 0 : 1);
}

void MemoryView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  peak_table_->setRowCount(0);
  if (doc) {
    const driver::ReportMemory& m = doc->report().memory;
    int r = 0;
    for (const driver::ReportCategory& c : m.categories) {
      if (c.bytes == 0) continue;
      peak_table_->setRowCount(r + 1);
      peak_table_->setItem(r, 0, new QTableWidgetItem(QString::fromStdString(c.name)));
      peak_table_->setItem(r, 1, new NumberItem(double(c.bytes), "B"));
      const double share = 100.0 * double(c.bytes) / std::max(1.0, double(m.peak_bytes));
      peak_table_->setItem(r++, 2, new NumberItem(share, "%"));
    }
    peak_table_->resizeColumnsToContents();
  }
  stack_by_->setEnabled(doc && !doc->report().memory.categories.empty());
  chart_->setDocument(std::move(doc));
}

}  // namespace kiln::studio
