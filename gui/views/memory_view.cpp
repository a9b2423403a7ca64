// The memory view (chart_views.h): report.memory's timeline and tensors.
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

#include "gui/views/chart_views.h"

namespace kiln::studio {
namespace {

constexpr size_t kBands = 6;  // largest tensors drawn individually; the rest is one area

QString mb(double b) {
  return QString::number(b / 1e6, 'f', 2) + " MB";
}

const QColor kRematColor(0x9c, 0x27, 0xb0);

const QColor kBandColors[kBands] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0xe1, 0x57, 0x59),
                                    QColor(0x76, 0xb7, 0xb2), QColor(0x59, 0xa1, 0x4f), QColor(0xed, 0xc9, 0x48)};

}  // namespace

MemoryChart::MemoryChart(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumSize(400, 250);
  setAutoFillBackground(true);
  QPalette p = palette();
  p.setColor(QPalette::Window, Qt::white);
  setPalette(p);
}

void MemoryChart::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  timeline_.clear();
  bands_.clear();
  peak_ = budget_ = 0;
  remat_nodes_.clear();
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
    peak_ = double(m.peak_bytes);
    peak_node_ = m.peak_node;
    std::vector<Band> all;
    for (const driver::ReportTensor& t : m.tensors) {
      if (t.kind == "input") continue;  // live all along: the floor, not a band
      // Intermediates are mostly unnamed (%12): their type names them then.
      QString name = QString::fromStdString(t.value);
      if (name.isEmpty()) name = QString::fromStdString(t.type);
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
  auto x = [&](double i) { return a.left() + a.width() * i / std::max(1.0, n - 1); };
  auto y = [&](double b) { return a.bottom() - a.height() * b / top; };
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
  // The nodes that recompute a value (--memory-budget), under the axis.
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
  p.drawText(QPointF(x(double(peak_node_)) + 4, a.top() + 14),
             QString("peak %1 at node %2").arg(mb(peak_)).arg(peak_node_));
  if (budget_ > 0) {
    p.setPen(QPen(Qt::darkGreen, 1.5));
    p.drawLine(QPointF(a.left(), y(budget_)), QPointF(a.right(), y(budget_)));
    p.drawText(QPointF(a.left() + 4, y(budget_) - 4), QString("budget %1").arg(mb(budget_)));
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
  for (const Band& b : bands_)
    if (b.first <= i && i <= b.last)
      s += QString("\n%1 (%2%7), made by %3, scope %4, nodes %5..%6")
               .arg(b.name, mb(b.bytes), b.producer, b.scope.isEmpty() ? "-" : b.scope)
               .arg(b.first)
               .arg(b.last)
               .arg(b.remat ? ", recomputed" : "");
  return s;
}

void MemoryChart::mouseMoveEvent(QMouseEvent* e) {
  const QString s = describeAt(e->pos());
  if (s.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(e->globalPosition().toPoint(), s, this);
}

MemoryView::MemoryView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  chart_ = new MemoryChart(this);
  layout->addWidget(chart_);
}

void MemoryView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  chart_->setDocument(std::move(doc));
}

}  // namespace kiln::studio
