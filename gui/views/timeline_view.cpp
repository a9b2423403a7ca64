#include "gui/views/timeline_view.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

#include "driver/messages.h"
#include "driver/timeline.h"
#include "gui/views/table_view.h"

namespace kiln::studio {
namespace {

constexpr double kLabelWidth = 150, kAxisHeight = 26, kRowHeight = 24;

QString ms(double v) {
  return QString::fromStdString(driver::formatQuantity(v, "ms"));
}

QColor colourOf(const std::string& category) {
  if (category == "node") return QColor(0x4e, 0x79, 0xa7);
  if (category == "data") return QColor(0x59, 0xa1, 0x4f);
  if (category == "comm") return QColor(0xf2, 0x8e, 0x2b);
  return QColor(0xba, 0xb0, 0xac);
}
const QColor kIntraOp(0xc6, 0xd9, 0xec);

/// A tick spacing of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `span`.
double niceStep(double span, int ticks) {
  const double raw = span / std::max(1, ticks);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

}  // namespace

TimelineChart::TimelineChart(QWidget* parent) : QWidget(parent) {
  setUpChart(this);
  setMinimumSize(500, 200);
}

void TimelineChart::setTimeline(const driver::ReportTimeline* timeline,
                                const std::vector<driver::ReportKernel>* kernels) {
  t_ = timeline;
  kernels_ = kernels;
  setMinimumHeight(int(kAxisHeight + kRowHeight * double(t_ ? t_->rows.size() : 0) + 30));
  fitStep(t_ && !t_->steps.empty() ? int(t_->steps.size()) - 1 : -1);
}

QRectF TimelineChart::plotArea() const {
  const double rows = t_ ? double(t_->rows.size()) : 0;
  return QRectF(kLabelWidth, kAxisHeight, std::max(10.0, width() - kLabelWidth - 10), kRowHeight * rows);
}

double TimelineChart::xOf(double v) const {
  const QRectF a = plotArea();
  return a.left() + (v - lo_) / std::max(1e-9, hi_ - lo_) * a.width();
}

double TimelineChart::msOf(double x) const {
  const QRectF a = plotArea();
  return lo_ + (x - a.left()) / a.width() * (hi_ - lo_);
}

void TimelineChart::setRange(double lo_ms, double hi_ms) {
  if (!(hi_ms > lo_ms)) hi_ms = lo_ms + 1e-3;
  lo_ = lo_ms;
  hi_ = hi_ms;
  update();
}

void TimelineChart::zoom(double factor, double at_x) {
  const double at = msOf(at_x);
  const double width = std::max((hi_ - lo_) / factor, 1e-4);  // down to 0.1 us across
  const double share = (at - lo_) / std::max(1e-9, hi_ - lo_);
  setRange(at - share * width, at - share * width + width);
}

void TimelineChart::pan(double fraction) {
  const double d = (hi_ - lo_) * fraction;
  setRange(lo_ + d, hi_ + d);
}

void TimelineChart::fitStep(int step) {
  fitted_step_ = step;
  if (!t_ || t_->steps.empty()) {
    setRange(0, 1);
    return;
  }
  double lo = t_->steps.front().start_ms, hi = t_->steps.back().end_ms;
  if (step >= 0 && size_t(step) < t_->steps.size()) {
    lo = t_->steps[size_t(step)].start_ms;
    hi = t_->steps[size_t(step)].end_ms;
  }
  const double margin = (hi - lo) * 0.01;
  setRange(lo - margin, hi + margin);
}

QRectF TimelineChart::rowRect(size_t r) const {
  const QRectF a = plotArea();
  return QRectF(a.left(), a.top() + kRowHeight * double(r), a.width(), kRowHeight);
}

QRectF TimelineChart::sliceRect(size_t i) const {
  if (!t_ || i >= t_->slices.size()) return {};
  const driver::TimelineSlice& s = t_->slices[i];
  const QRectF a = plotArea(), row = rowRect(size_t(s.row));
  const double x0 = std::max(a.left(), xOf(s.start_ms)), x1 = std::min(a.right(), xOf(s.start_ms + s.dur_ms));
  if (x1 < a.left() || x0 > a.right() || x1 < x0) return {};
  return QRectF(x0, row.top() + 3, std::max(x1 - x0, 1.0), row.height() - 6);
}

int TimelineChart::sliceAt(QPointF pos) const {
  if (!t_) return -1;
  int best = -1;
  double best_width = 0;
  for (size_t i = 0; i < t_->slices.size(); ++i) {
    // A thin slice is hard to hit: 2 px of slack either side; the widest under the cursor wins.
    const QRectF r = sliceRect(i);
    if (r.isEmpty() || !r.adjusted(-2, 0, 2, 0).contains(pos)) continue;
    if (best < 0 || r.width() > best_width) {
      best = int(i);
      best_width = r.width();
    }
  }
  return best;
}

QString TimelineChart::describeAt(QPointF pos) const {
  if (!t_) return {};
  const int i = sliceAt(pos);
  if (i < 0) {
    const QRectF a = plotArea();
    if (!a.contains(pos)) return {};
    const size_t row = size_t((pos.y() - a.top()) / kRowHeight);
    if (row < t_->rows.size() && t_->rows[row].kind == "pool")
      return "cpu pool thread " + QString::number(t_->rows[row].thread) +
             ": light blue spans are kernels of the executor's given this thread too (intra-op)";
    return QString("%1 from the first step's start").arg(ms(msOf(pos.x())));
  }
  const driver::TimelineSlice& s = t_->slices[size_t(i)];
  QString text = QString::fromStdString(s.name);
  if (s.node >= 0 && kernels_ && size_t(s.node) < kernels_->size())
    text = QString("node %1: %2").arg(s.node).arg(QString::fromStdString((*kernels_)[size_t(s.node)].node));
  text += QString("\n%1, at %2").arg(ms(s.dur_ms), ms(s.start_ms));
  if (!s.detail.empty()) text += "\n" + QString::fromStdString(s.detail);
  if (s.category == "wait") text += "\nblocked: counted as idle";
  return text;
}

void TimelineChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  if (!t_ || t_->rows.empty()) {
    p.drawText(rect(), Qt::AlignCenter,
               t_ ? "This report's timeline is empty."
                  : "No timeline: kiln train --report records one (the first --trace-steps steps), as does Run > "
                    "Measure.");
    return;
  }
  const QRectF a = plotArea();
  // Steps: alternate shading and their names.
  for (size_t k = 0; k < t_->steps.size(); ++k) {
    const driver::TimelineStep& s = t_->steps[k];
    const double x0 = std::max(a.left(), xOf(s.start_ms)), x1 = std::min(a.right(), xOf(s.end_ms));
    if (x1 <= x0) continue;
    p.fillRect(QRectF(x0, a.top(), x1 - x0, a.height()), k % 2 ? QColor(0xf4, 0xf4, 0xf4) : QColor(0xfa, 0xfa, 0xff));
    p.setPen(Qt::darkGray);
    const QString label = QString("step %1 (%2)").arg(s.step).arg(ms(s.end_ms - s.start_ms));
    if (x1 - x0 > p.fontMetrics().horizontalAdvance(label) + 6)  // a step cut at the edge: no label
      p.drawText(QRectF(x0 + 3, a.bottom() + 2, x1 - x0 - 3, 18), Qt::AlignLeft, label);
  }
  // Row labels and separators.
  for (size_t r = 0; r < t_->rows.size(); ++r) {
    const QRectF row = rowRect(r);
    p.setPen(QColor(0xdd, 0xdd, 0xdd));
    p.drawLine(QPointF(0, row.bottom()), QPointF(a.right(), row.bottom()));
    p.setPen(Qt::black);
    p.drawText(QRectF(4, row.top(), kLabelWidth - 8, row.height()), Qt::AlignVCenter | Qt::AlignLeft,
               QString::fromStdString(t_->rows[r].name));
  }
  p.setClipRect(a);
  // Intra-op: an executor kernel given n threads holds pool threads 1..n-1.
  for (const driver::TimelineSlice& s : t_->slices) {
    if (s.category != "node" || s.threads < 2 || t_->rows[size_t(s.row)].kind != "executor") continue;
    const double x0 = xOf(s.start_ms), x1 = xOf(s.start_ms + s.dur_ms);
    if (x1 < a.left() || x0 > a.right()) continue;
    for (size_t r = 0; r < t_->rows.size(); ++r)
      if (t_->rows[r].kind == "pool" && t_->rows[r].thread < s.threads) {
        const QRectF row = rowRect(r);
        p.fillRect(QRectF(x0, row.top() + 6, std::max(x1 - x0, 0.5), row.height() - 12), kIntraOp);
      }
  }
  for (size_t i = 0; i < t_->slices.size(); ++i) {
    const QRectF r = sliceRect(i);
    if (r.isEmpty()) continue;
    const driver::TimelineSlice& s = t_->slices[i];
    if (s.category == "wait") {
      p.setPen(QColor(0x99, 0x99, 0x99));
      p.setBrush(QBrush(QColor(0xbb, 0xbb, 0xbb), Qt::BDiagPattern));
    } else {
      p.setPen(r.width() > 3 ? QPen(Qt::white, 0.5) : Qt::NoPen);
      p.setBrush(colourOf(s.category));
    }
    p.drawRect(r);
    const QString label = QString::fromStdString(s.name);
    if (s.category != "wait" && r.width() > p.fontMetrics().horizontalAdvance(label) + 6) {
      p.setPen(Qt::white);
      p.drawText(r.adjusted(3, 0, -2, 0), Qt::AlignVCenter | Qt::AlignLeft, label);
    }
  }
  p.setClipping(false);
  // The time axis.
  p.setPen(Qt::black);
  p.drawLine(QPointF(a.left(), a.top()), QPointF(a.right(), a.top()));
  const double step = niceStep(hi_ - lo_, std::max(2, int(a.width() / 110)));
  for (double v = std::ceil(lo_ / step) * step; v <= hi_; v += step) {
    const double x = xOf(v);
    p.drawLine(QPointF(x, a.top() - 4), QPointF(x, a.top()));
    p.drawText(QRectF(x - 50, 2, 100, kAxisHeight - 8), Qt::AlignHCenter | Qt::AlignBottom, ms(v));
  }
  // Legend.
  double lx = 4;
  const double ly = a.bottom() + 22;
  for (const auto& [label, colour] : std::vector<std::pair<QString, QColor>>{{"kernel", colourOf("node")},
                                                                               {"intra-op", kIntraOp},
                                                                               {"batch", colourOf("data")},
                                                                               {"collective", colourOf("comm")},
                                                                               {"waiting", colourOf("wait")}}) {
    p.fillRect(QRectF(lx, ly, 10, 10), colour);
    p.setPen(Qt::black);
    p.drawText(QPointF(lx + 14, ly + 9), label);
    lx += 28 + p.fontMetrics().horizontalAdvance(label);
  }
}

void TimelineChart::wheelEvent(QWheelEvent* e) {
  const double notches = e->angleDelta().y() / 120.0;
  if (notches == 0) return;
  if (e->modifiers() & Qt::ShiftModifier)
    pan(-0.1 * notches);
  else
    zoom(std::pow(1.25, notches), e->position().x());
  e->accept();
}

void TimelineChart::mousePressEvent(QMouseEvent* e) {
  setFocus();
  if (e->button() != Qt::LeftButton) return;
  dragging_ = true;
  dragged_ = false;
  drag_x_ = e->position().x();
}

void TimelineChart::mouseMoveEvent(QMouseEvent* e) {
  if (dragging_) {
    const double dx = e->position().x() - drag_x_;
    if (std::abs(dx) > 2 || dragged_) {
      dragged_ = true;
      pan(-dx / plotArea().width());
      drag_x_ = e->position().x();
    }
    return;
  }
  const QString s = describeAt(e->position());
  if (s.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(e->globalPosition().toPoint(), s, this);
}

void TimelineChart::mouseReleaseEvent(QMouseEvent* e) {
  if (!dragging_) return;
  dragging_ = false;
  if (dragged_) return;
  const int i = sliceAt(e->position());  // a click, not a drag: select the node
  if (i >= 0 && t_->slices[size_t(i)].node >= 0 && on_node_clicked) on_node_clicked(int(t_->slices[size_t(i)].node));
}

void TimelineChart::mouseDoubleClickEvent(QMouseEvent*) {
  fitStep(fitted_step_);
}

void TimelineChart::keyPressEvent(QKeyEvent* e) {
  const double centre = plotArea().center().x();
  switch (e->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal:
      zoom(1.5, centre);
      break;
    case Qt::Key_Minus:
      zoom(1 / 1.5, centre);
      break;
    case Qt::Key_Left:
      pan(-0.2);
      break;
    case Qt::Key_Right:
      pan(0.2);
      break;
    case Qt::Key_Home:
      fitStep(fitted_step_);
      break;
    default:
      QWidget::keyPressEvent(e);
  }
}

TimelineView::TimelineView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  step_ = new QComboBox(this);
  step_->setToolTip("The step the chart fits and the table sums over (the first pays for warm-up)");
  connect(step_, &QComboBox::currentIndexChanged, this, [this](int i) {
    if (i >= 0) showStep(i == step_->count() - 1 ? -1 : i);
  });
  top->addWidget(summary_, 1);
  top->addWidget(step_);
  auto* body = new QHBoxLayout;
  chart_ = new TimelineChart(this);
  chart_->setToolTip(
      "Wheel: zoom; drag or Shift+wheel: pan; double click or Home: fit the step; +/-/arrows from the keyboard. "
      "Click a kernel to select its node in the graph and kernels views.");
  table_ = new QTableWidget(this);
  table_->setColumnCount(5);
  table_->setHorizontalHeaderLabels({"thread", "busy", "intra-op", "idle", "idle share"});
  setHeaderTips(table_, {{"busy", "the thread's own slices: kernels, batches, collectives (their union)"},
                         {"intra-op", "pool threads: given to a kernel the executor ran alone (its OpenMP team); "
                                      "whether the kernel kept the thread busy is not measured"},
                         {"idle", "the rest of the step: nothing ran there, or the thread waited (for a batch, "
                                  "for a collective)"},
                         {"idle share", "idle / the step's wall time"}});
  setUpTable(table_);
  table_->setMinimumWidth(380);
  body->addWidget(chart_, 1);
  body->addWidget(table_);
  layout->addLayout(top);
  layout->addLayout(body, 1);
}

void TimelineView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  const driver::ReportTimeline* t = doc_ && doc_->report().timeline ? &*doc_->report().timeline : nullptr;
  chart_->setTimeline(t, doc_ ? &doc_->kernels() : nullptr);
  {
    QSignalBlocker block(step_);
    step_->clear();
    if (t) {
      for (const driver::TimelineStep& s : t->steps) step_->addItem(QString("step %1").arg(s.step));
      step_->addItem("all recorded steps");
    }
  }
  step_->setEnabled(t && !t->steps.empty());
  if (!t) {
    summary_->setText(doc_ ? "This report has no timeline: kiln train --report records one (the first "
                             "--trace-steps steps); a compile report has none."
                           : "No report open.");
    table_->setRowCount(0);
    return;
  }
  const int last = int(t->steps.size()) - 1;
  QSignalBlocker block(step_);
  step_->setCurrentIndex(std::max(last, 0));
  showStep(last);
}

void TimelineView::showStep(int step) {
  const driver::ReportTimeline* t = doc_ && doc_->report().timeline ? &*doc_->report().timeline : nullptr;
  if (!t) return;
  {
    QSignalBlocker block(step_);
    step_->setCurrentIndex(step < 0 ? step_->count() - 1 : step);
  }
  chart_->fitStep(step);
  // Sum over the chosen step, or over every recorded step.
  std::vector<driver::RowActivity> sum(t->rows.size());
  double wall = 0;
  for (size_t k = 0; k < t->steps.size(); ++k) {
    if (step >= 0 && size_t(step) != k) continue;
    const auto rows = driver::rowActivity(*t, k);
    for (size_t r = 0; r < rows.size(); ++r) {
      sum[r].busy_ms += rows[r].busy_ms;
      sum[r].intra_op_ms += rows[r].intra_op_ms;
      sum[r].idle_ms += rows[r].idle_ms;
    }
    wall += t->steps[k].end_ms - t->steps[k].start_ms;
  }
  table_->setSortingEnabled(false);
  table_->setRowCount(int(t->rows.size()));
  for (size_t r = 0; r < t->rows.size(); ++r) {
    table_->setItem(int(r), 0, new QTableWidgetItem(QString::fromStdString(t->rows[r].name)));
    table_->setItem(int(r), 1, new NumberItem(sum[r].busy_ms, "ms"));
    table_->setItem(int(r), 2, new NumberItem(sum[r].intra_op_ms, "ms"));
    table_->setItem(int(r), 3, new NumberItem(sum[r].idle_ms, "ms"));
    table_->setItem(int(r), 4, new NumberItem(wall > 0 ? 100.0 * sum[r].idle_ms / wall : 0.0, "%"));
  }
  table_->resizeColumnsToContents();
  const QString which =
      step >= 0 ? QString("Step %1").arg(t->steps[size_t(step)].step) : QString("%1 steps").arg(t->steps.size());
  summary_->setText(QString("%1: %2 wall time on %3 rows. Times measured while training (kiln train --report "
                            "records the first steps; the first pays for warm-up).")
                        .arg(which, ms(wall))
                        .arg(t->rows.size()));
}

}  // namespace kiln::studio
