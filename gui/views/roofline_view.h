// The roofline view: every measured kernel as a point at (arithmetic
// intensity, achieved FLOP/s) on log-log axes under the machine's roofs
// (report.machine: the f32 and bf16 GEMM rates and the memory bandwidth
// that kiln bench --machine measured; driver/roofline.h), sized by its
// share of the step and coloured by the precision it computes in. Hover
// names the node, a click selects it in the graph and kernels views.
// Beside it, the kernels furthest below their roof weighted by time (the
// time each would save at its roof), kernels without arithmetic included.
#pragma once

#include <QLabel>
#include <QTableWidget>
#include <functional>

#include "driver/roofline.h"
#include "gui/views/view.h"

namespace kiln::studio {

class RooflineChart : public QWidget {
 public:
  explicit RooflineChart(QWidget* parent = nullptr);
  void setDocument(std::shared_ptr<const StudioDocument> doc);
  /// The points drawn (kernels with arithmetic), in kernel order.
  const std::vector<driver::RooflinePoint>& points() const { return drawn_; }
  /// Where point `i` of points() is drawn, and its radius.
  QPointF pointPos(size_t i) const;
  double pointRadius(size_t i) const;
  /// The point under `pos` (index into points()), -1 where none.
  int pointAt(QPointF pos) const;
  /// The y (pixels) of the compute roof `flops` and the memory roof at intensity `x`.
  double yOf(double flops_per_s) const;
  double xOf(double intensity) const;
  QString describeAt(QPointF pos) const;
  std::function<void(int)> on_node_clicked;
  /// The keyboard's point (index into points()): Left/Right step through
  /// them by intensity, Enter selects its node; -1 before the first key.
  int cursorPoint() const { return cursor_; }

 protected:
  void paintEvent(QPaintEvent*) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;

 private:
  QRectF plotArea() const;
  std::shared_ptr<const StudioDocument> doc_;
  std::vector<driver::RooflinePoint> drawn_;
  int cursor_ = -1;
  double step_ms_ = 0;  ///< the measured kernels' time per step (the sizes' 100 %)
  double x_lo_ = 0.01, x_hi_ = 100, y_lo_ = 1e6, y_hi_ = 1e12;  ///< log axes' ends
};

class RooflineView : public View {
 public:
  explicit RooflineView(QWidget* parent = nullptr);
  QString name() const override { return "roofline"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
  QWidget* renderTarget() override { return chart_; }
  RooflineChart* chart() const { return chart_; }
  /// Kernels by time lost below their roof: node, op, dtype, time, achieved, of roof, lost.
  QTableWidget* table() const { return table_; }
  QTableWidget* csvTable() override { return table_; }

 private:
  QLabel* summary_;
  RooflineChart* chart_;
  QTableWidget* table_;
};

}  // namespace kiln::studio
