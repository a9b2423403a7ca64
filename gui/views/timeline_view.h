// The timeline view: the recorded steps of a measured report (report
// .timeline, driver/timeline.h) as a Gantt chart, one row per thread -- the
// executor, each pool thread (nodes run side by side, and the spans a
// kernel of the executor's lent them: intra-op), the data prefetch thread,
// the collectives on the communication thread. The mouse wheel zooms
// around the cursor, dragging pans, a double click (or Home) fits the step;
// the keyboard does the same (+/-, arrows, Home). A click on a node's slice
// selects it in the graph view and the kernels table. Beside it, each
// row's busy, intra-op and idle time in the chosen step.
#pragma once

#include <QComboBox>
#include <QLabel>
#include <QTableWidget>
#include <functional>

#include "driver/report_types.h"
#include "gui/views/view.h"

namespace kiln::studio {

class TimelineChart : public QWidget {
 public:
  explicit TimelineChart(QWidget* parent = nullptr);
  void setTimeline(const driver::ReportTimeline* timeline, const std::vector<driver::ReportKernel>* kernels);
  /// Show [lo, hi) ms.
  void setRange(double lo_ms, double hi_ms);
  double rangeLo() const { return lo_; }
  double rangeHi() const { return hi_; }
  /// Zoom by `factor` (> 1: in) around the time at x `at_x`.
  void zoom(double factor, double at_x);
  /// Move the range by `fraction` of its width.
  void pan(double fraction);
  /// The window of step index `step` (the whole recording: -1) fills the width.
  void fitStep(int step);
  /// The rectangle slice `i` is drawn in (empty when off screen or too thin).
  QRectF sliceRect(size_t i) const;
  /// The slice under `pos`, -1 where none.
  int sliceAt(QPointF pos) const;
  /// The y range of row `r`.
  QRectF rowRect(size_t r) const;
  /// What the tooltip says at `pos` ("" where nothing).
  QString describeAt(QPointF pos) const;
  /// Called with a node's index when its slice is clicked.
  std::function<void(int)> on_node_clicked;

 protected:
  void paintEvent(QPaintEvent*) override;
  void wheelEvent(QWheelEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseDoubleClickEvent(QMouseEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;

 private:
  double xOf(double ms) const;
  double msOf(double x) const;
  QRectF plotArea() const;

  const driver::ReportTimeline* t_ = nullptr;
  const std::vector<driver::ReportKernel>* kernels_ = nullptr;
  double lo_ = 0, hi_ = 1;
  int fitted_step_ = -1;
  bool dragging_ = false;
  double drag_x_ = 0;
  bool dragged_ = false;
};

class TimelineView : public View {
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  QString name() const override { return "timeline"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
  QWidget* renderTarget() override { return chart_; }
  TimelineChart* chart() const { return chart_; }
  /// Per row: thread, busy, intra-op, idle, idle share (of the chosen step).
  QTableWidget* idleTable() const { return table_; }
  QTableWidget* csvTable() override { return table_; }
  /// Show step index `step` of the recorded steps (-1: all of them).
  void showStep(int step);

 private:
  std::shared_ptr<const StudioDocument> doc_;
  QLabel* summary_;
  QComboBox* step_;
  TimelineChart* chart_;
  QTableWidget* table_;
};

}  // namespace kiln::studio
