#include "gui/views/roofline_view.h"

#include <QHeaderView>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QSplitter>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <tuple>

#include "driver/messages.h"
#include "driver/provenance_paths.h"
#include "gui/views/table_view.h"

namespace kiln::studio {
namespace {

QString q(double v, const char* unit) {
  return QString::fromStdString(driver::formatQuantity(v, unit));
}

QColor colourOf(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "f16") return QColor(0xf2, 0x8e, 0x2b, 200);
  return QColor(0x4e, 0x79, 0xa7, 200);
}

double decadeBelow(double v) {
  return std::pow(10.0, std::floor(std::log10(v)));
}
double decadeAbove(double v) {
  return std::pow(10.0, std::ceil(std::log10(v)));
}

}  // namespace

RooflineChart::RooflineChart(QWidget* parent) : QWidget(parent) {
  setUpChart(this);
  setMinimumSize(420, 320);
}

void RooflineChart::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  drawn_.clear();
  cursor_ = -1;
  step_ms_ = 0;
  if (doc_) {
    for (const driver::RooflinePoint& p : driver::rooflinePoints(doc_->report())) {
      step_ms_ += p.ms;
      if (p.intensity > 0) drawn_.push_back(p);
    }
    // Axes: decades around the points and the roofs (the ridge in sight).
    double xl = 1e300, xh = 0, yl = 1e300, yh = 0;
    for (const auto& p : drawn_) {
      xl = std::min(xl, p.intensity), xh = std::max(xh, p.intensity);
      yl = std::min(yl, p.flops_per_s), yh = std::max(yh, p.flops_per_s);
    }
    if (const auto& m = doc_->report().machine; m && m->bandwidth_bytes > 0) {
      const double top = std::max(m->fp32_gemm_flops, m->bf16_gemm_flops.value_or(0));
      yh = std::max(yh, top);
      const double ridge = top / m->bandwidth_bytes;
      xl = std::min(xl, ridge / 10), xh = std::max(xh, ridge * 10);
    }
    if (xh > 0) {
      x_lo_ = decadeBelow(xl), x_hi_ = decadeAbove(xh * 1.01);
      y_lo_ = decadeBelow(yl), y_hi_ = decadeAbove(yh * 1.5);
    }
  }
  update();
}

QRectF RooflineChart::plotArea() const {
  return QRectF(100, 20, std::max(10, width() - 120), std::max(10, height() - 70));
}

double RooflineChart::xOf(double intensity) const {
  const QRectF a = plotArea();
  return a.left() + a.width() * std::log(intensity / x_lo_) / std::log(x_hi_ / x_lo_);
}

double RooflineChart::yOf(double flops) const {
  const QRectF a = plotArea();
  return a.bottom() - a.height() * std::log(flops / y_lo_) / std::log(y_hi_ / y_lo_);
}

QPointF RooflineChart::pointPos(size_t i) const {
  return QPointF(xOf(drawn_[i].intensity), yOf(drawn_[i].flops_per_s));
}

double RooflineChart::pointRadius(size_t i) const {
  // Area by share of the step: 3 px at nothing, 24 px at the whole step.
  const double share = step_ms_ > 0 ? drawn_[i].ms / step_ms_ : 0;
  return 3 + 21 * std::sqrt(share);
}

int RooflineChart::pointAt(QPointF pos) const {
  int best = -1;
  double best_d = 0;
  for (size_t i = 0; i < drawn_.size(); ++i) {
    const QPointF d = pointPos(i) - pos;
    const double dist = std::hypot(d.x(), d.y());
    if (dist <= std::max(pointRadius(i), 4.0) && (best < 0 || dist < best_d)) {
      best = int(i);
      best_d = dist;
    }
  }
  return best;
}

QString RooflineChart::describeAt(QPointF pos) const {
  const int i = pointAt(pos);
  if (i < 0 || !doc_) return {};
  const driver::RooflinePoint& p = drawn_[size_t(i)];
  const driver::ReportKernel& k = doc_->kernels()[p.kernel];
  QString s = QString("node %1: %2\nkernel %3 (%4)\n%5 per step, %6 FLOP/byte, %7/s, %8/s")
                  .arg(p.kernel)
                  .arg(QString::fromStdString(k.node), QString::fromStdString(k.kernel),
                       QString::fromStdString(k.dtype.empty() ? "?" : k.dtype), q(p.ms, "ms"))
                  .arg(p.intensity, 0, 'g', 3)
                  .arg(q(p.flops_per_s, "FLOP"), q(p.bytes_per_s, "B"));
  if (p.roof > 0)
    s += QString("\n%1 % of its %2 roof; %3 per step lost below it")
             .arg(100 * p.efficiency, 0, 'f', 1)
             .arg(p.compute_bound ? "compute" : "memory")
             .arg(q(p.lost_ms, "ms"));
  return s;
}

void RooflineChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), Qt::white);
  if (!doc_ || drawn_.empty()) {
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
               !doc_ ? "No report open."
                     : "No measured kernels to place: kiln train --report (or Run > Measure) times every node.");
    return;
  }
  const QRectF a = plotArea();
  // Decade grid and labels.
  p.setPen(QColor(0xe4, 0xe4, 0xe4));
  for (double x = x_lo_; x <= x_hi_ * 1.001; x *= 10) p.drawLine(QPointF(xOf(x), a.top()), QPointF(xOf(x), a.bottom()));
  for (double y = y_lo_; y <= y_hi_ * 1.001; y *= 10) p.drawLine(QPointF(a.left(), yOf(y)), QPointF(a.right(), yOf(y)));
  p.setPen(Qt::black);
  for (double x = x_lo_; x <= x_hi_ * 1.001; x *= 10)
    p.drawText(QRectF(xOf(x) - 40, a.bottom() + 4, 80, 16), Qt::AlignHCenter, QString::number(x, 'g', 3));
  for (double y = y_lo_; y <= y_hi_ * 1.001; y *= 10)
    p.drawText(QRectF(0, yOf(y) - 8, a.left() - 6, 16), Qt::AlignRight | Qt::AlignVCenter, q(y, "FLOP") + "/s");
  p.drawText(QRectF(a.left(), a.bottom() + 22, a.width(), 18), Qt::AlignHCenter,
             "arithmetic intensity (FLOP per byte moved)");
  p.drawRect(a);
  p.setClipRect(a);
  // Roofs: bandwidth x intensity up to each compute rate.
  const auto& m = doc_->report().machine;
  if (m && m->bandwidth_bytes > 0) {
    auto roof = [&](double peak, const QColor& colour, const QString& label) {
      const double ridge = peak / m->bandwidth_bytes;
      p.setPen(QPen(colour, 2));
      p.drawLine(QPointF(xOf(x_lo_), yOf(m->bandwidth_bytes * x_lo_)), QPointF(xOf(ridge), yOf(peak)));
      p.drawLine(QPointF(xOf(ridge), yOf(peak)), QPointF(xOf(x_hi_), yOf(peak)));
      p.drawText(QPointF(xOf(ridge) + 6, yOf(peak) - 5), label + " " + q(peak, "FLOP") + "/s");
    };
    roof(m->fp32_gemm_flops, QColor(0x2a, 0x4a, 0x7a), "f32 GEMM");
    if (m->bf16_gemm_flops) roof(*m->bf16_gemm_flops, QColor(0xb0, 0x5a, 0x10), "bf16 GEMM");
    p.setPen(QColor(0x44, 0x44, 0x44));
    const double lx = x_lo_ * 1.5;
    p.drawText(QPointF(xOf(lx) + 4, yOf(m->bandwidth_bytes * lx) - 6), q(m->bandwidth_bytes, "B") + "/s");
  }
  // Largest first, so small points stay visible on top.
  std::vector<size_t> order(drawn_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return drawn_[x].ms > drawn_[y].ms; });
  for (size_t i : order) {
    p.setPen(QPen(Qt::white, 0.8));
    p.setBrush(colourOf(doc_->kernels()[drawn_[i].kernel].dtype));
    const double r = pointRadius(i);
    p.drawEllipse(pointPos(i), r, r);
  }
  if (cursor_ >= 0 && size_t(cursor_) < drawn_.size()) {  // the keyboard's point
    p.setPen(QPen(Qt::black, 2));
    p.setBrush(Qt::NoBrush);
    const double r = pointRadius(size_t(cursor_)) + 3;
    p.drawEllipse(pointPos(size_t(cursor_)), r, r);
  }
  p.setClipping(false);
  if (!m) {
    p.setPen(Qt::darkRed);
    p.drawText(QRectF(a.left() + 8, a.top() + 6, a.width() - 16, 40), Qt::AlignLeft | Qt::TextWordWrap,
               "No roofs: this report has no machine measurements. Run kiln bench --machine once on this machine, "
               "then kiln train --report again.");
  }
}

void RooflineChart::mouseMoveEvent(QMouseEvent* e) {
  const QString s = describeAt(e->position());
  if (s.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(e->globalPosition().toPoint(), s, this);
}

void RooflineChart::keyPressEvent(QKeyEvent* e) {
  if (drawn_.empty()) return QWidget::keyPressEvent(e);
  // Left to right by intensity, then by rate.
  std::vector<size_t> order(drawn_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(drawn_[a].intensity, drawn_[a].flops_per_s) < std::tie(drawn_[b].intensity, drawn_[b].flops_per_s);
  });
  const auto at = std::find(order.begin(), order.end(), size_t(std::max(cursor_, 0))) - order.begin();
  switch (e->key()) {
    case Qt::Key_Right: cursor_ = int(order[cursor_ < 0 ? 0 : std::min<size_t>(order.size() - 1, at + 1)]); break;
    case Qt::Key_Left: cursor_ = int(order[cursor_ < 0 ? 0 : std::max<ptrdiff_t>(0, at - 1)]); break;
    case Qt::Key_Return:
    case Qt::Key_Enter:
      if (cursor_ >= 0 && on_node_clicked) on_node_clicked(int(drawn_[size_t(cursor_)].kernel));
      return;
    default: return QWidget::keyPressEvent(e);
  }
  update();
  const QPointF pos = pointPos(size_t(cursor_));
  QToolTip::showText(mapToGlobal(pos.toPoint()), describeAt(pos), this);
}

void RooflineChart::mousePressEvent(QMouseEvent* e) {
  const int i = pointAt(e->position());
  if (i >= 0 && on_node_clicked) on_node_clicked(int(drawn_[size_t(i)].kernel));
}

RooflineView::RooflineView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  auto* split = new QSplitter(this);
  chart_ = new RooflineChart(split);
  table_ = new QTableWidget(split);
  table_->setColumnCount(7);
  table_->setHorizontalHeaderLabels({"node", "op", "dtype", "time", "achieved", "of roof", "lost"});
  setHeaderTips(table_, {{"time", "measured per step while training"},
                         {"achieved", "FLOP/s; for kernels without arithmetic, bytes moved per second"},
                         {"of roof", "achieved / the roof at its intensity: the lower of its precision's GEMM rate "
                                     "and bandwidth x intensity (bandwidth alone without arithmetic)"},
                         {"lost", "time x (1 - of roof): what it would save at its roof, per step"},
                         {"dtype", "the precision it computes in: bf16 and f16 kernels are held to the bf16 GEMM "
                                   "rate where measured"}});
  setUpTable(table_);
  table_->setWordWrap(false);
  split->addWidget(chart_);
  split->addWidget(table_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  layout->addWidget(summary_);
  layout->addWidget(split, 1);
}

void RooflineView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  chart_->setDocument(doc);
  table_->setSortingEnabled(false);
  table_->setRowCount(0);
  if (!doc) {
    summary_->setText("No report open.");
    return;
  }
  auto points = driver::rooflinePoints(doc->report());
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.lost_ms > b.lost_ms; });
  std::vector<std::string> names;
  for (const driver::ReportKernel& k : doc->kernels()) names.push_back(k.node);
  const std::string dir = driver::commonSourceDir(names);
  table_->setRowCount(int(points.size()));
  double total = 0, lost = 0;
  for (size_t r = 0; r < points.size(); ++r) {
    const driver::RooflinePoint& p = points[r];
    const driver::ReportKernel& k = doc->kernels()[p.kernel];
    total += p.ms;
    lost += p.lost_ms;
    auto* node = new QTableWidgetItem(QString::fromStdString(driver::relativeToDir(k.node, dir)));
    node->setToolTip(QString::fromStdString(k.node));
    node->setData(Qt::UserRole + 1, qlonglong(p.kernel));
    table_->setItem(int(r), 0, node);
    table_->setItem(int(r), 1, new QTableWidgetItem(QString::fromStdString(k.op)));
    table_->setItem(int(r), 2, new QTableWidgetItem(QString::fromStdString(k.dtype)));
    table_->setItem(int(r), 3, new NumberItem(p.ms, "ms"));
    auto* achieved = p.intensity > 0 ? new NumberItem(p.flops_per_s, "FLOP") : new NumberItem(p.bytes_per_s, "B");
    achieved->setText(achieved->text() + "/s");
    table_->setItem(int(r), 4, achieved);
    if (p.roof > 0) {
      table_->setItem(int(r), 5, new NumberItem(100 * p.efficiency, "%"));
      table_->setItem(int(r), 6, new NumberItem(p.lost_ms, "ms"));
    } else {
      table_->setItem(int(r), 5, new QTableWidgetItem("-"));
      table_->setItem(int(r), 6, new QTableWidgetItem("-"));
    }
  }
  table_->setSortingEnabled(true);
  table_->resizeColumnsToContents();
  table_->setColumnWidth(0, std::min(table_->columnWidth(0), 240));  // the numbers stay in sight
  const auto& m = doc->report().machine;
  QString text;
  if (points.empty())
    text = "No measured kernels: kiln train --report (or Run > Measure) times every node.";
  else if (!m)
    text = QString("%1 kernels, %2 per step. No roofs: run kiln bench --machine once on this machine, then kiln "
                   "train --report again.")
               .arg(points.size())
               .arg(q(total, "ms"));
  else
    text = QString("%1 kernels, %2 per step; %3 (%4 %) would be saved if each ran at its roof. Roofs of %5, %6 "
                   "threads, measured %7 by kiln bench --machine.")
               .arg(points.size())
               .arg(q(total, "ms"), q(lost, "ms"))
               .arg(total > 0 ? 100 * lost / total : 0, 0, 'f', 1)
               .arg(QString::fromStdString(m->cpu))
               .arg(m->threads)
               .arg(QString::fromStdString(m->measured_at));
  summary_->setText(text);
}

}  // namespace kiln::studio
