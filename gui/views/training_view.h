// The training view: what a kiln train run with a recipe did over its steps
// (report.steps and report.recipe; docs/recipes.md). A chart of the training
// loss per step, the held-out metric at each evaluation on its own axis with
// the target, and a marker at every schedule point where the compiled step
// changed (what changed, what compiling it cost, the compile cache's
// answer); below it, the schedule points and evaluations as a table.
#pragma once

#include <QLabel>
#include <QTableWidget>

#include "gui/views/view.h"

namespace kiln::studio {

class TrainingChart : public QWidget {
 public:
  explicit TrainingChart(QWidget* parent = nullptr);
  void setDocument(std::shared_ptr<const StudioDocument> doc);
  /// The x (pixels) of step `step`; the schedule markers are drawn there.
  double xOf(double step) const;
  /// What the tooltip says at `pos`: the nearest schedule point, evaluation or step.
  QString describeAt(QPointF pos) const;

 protected:
  void paintEvent(QPaintEvent*) override;
  void mouseMoveEvent(QMouseEvent* e) override;

 private:
  QRectF plotArea() const;
  std::shared_ptr<const StudioDocument> doc_;
  double last_step_ = 1;
};

class TrainingView : public View {
 public:
  explicit TrainingView(QWidget* parent = nullptr);
  QString name() const override { return "training"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
  QWidget* renderTarget() override { return chart_; }
  TrainingChart* chart() const { return chart_; }
  /// Schedule points and evaluations by step: step, event, what, ms, cache, metric.
  QTableWidget* table() const { return table_; }
  QTableWidget* csvTable() override { return table_; }
  QString summary() const { return summary_->text(); }

 private:
  QLabel* summary_;
  TrainingChart* chart_;
  QTableWidget* table_;
};

}  // namespace kiln::studio
