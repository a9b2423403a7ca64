// The views that are drawn rather than tabulated: the memory timeline
// (live bytes over the schedule, the largest tensors as bands of their own,
// the peak and the budget marked, the nodes and tensors the remat pass
// recomputes marked; hovering names the tensor under the cursor) and the communication view (per bucket dense against sent bytes,
// and a row per step of compute and communication).
#pragma once

#include <QTableWidget>
#include <functional>

#include "gui/views/view.h"

namespace kiln::studio {

/// The timeline drawing, a widget of its own so it can be rendered alone.
class MemoryChart : public QWidget {
 public:
  explicit MemoryChart(QWidget* parent = nullptr);
  /// Called with the node under a click (the graph view selects it).
  std::function<void(int)> on_node_clicked;
  /// The node index at `pos` on the time axis, -1 outside the plot.
  int nodeAt(QPoint pos) const;
  void setDocument(std::shared_ptr<const StudioDocument> doc);
  /// The tensor drawn at `pos` ("" where none): what the tooltip says.
  QString describeAt(QPoint pos) const;

 protected:
  void paintEvent(QPaintEvent*) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;

 private:
  struct Band {
    QString name, producer, scope;
    int64_t first = 0, last = 0;
    double bytes = 0;
    bool remat = false;  ///< recomputed by the remat pass (hatched)
  };
  QRectF plotArea() const;
  std::shared_ptr<const StudioDocument> doc_;
  std::vector<double> timeline_;
  std::vector<Band> bands_;  ///< largest tensors, drawn on the bottom, largest first
  double peak_ = 0, budget_ = 0;
  int64_t peak_node_ = 0;
  std::vector<int64_t> remat_nodes_;  ///< nodes that recompute a value (marked under the axis)

 public:
  size_t rematNodes() const { return remat_nodes_.size(); }
};

class MemoryView : public View {
 public:
  explicit MemoryView(QWidget* parent = nullptr);
  QString name() const override { return "memory"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
  QWidget* renderTarget() override { return chart_; }
  MemoryChart* chart() const { return chart_; }

 private:
  MemoryChart* chart_;
};

class CommChart : public QWidget {
 public:
  explicit CommChart(QWidget* parent = nullptr);
  void setDocument(std::shared_ptr<const StudioDocument> doc);

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  std::shared_ptr<const StudioDocument> doc_;
};

class CommView : public View {
 public:
  explicit CommView(QWidget* parent = nullptr);
  QString name() const override { return "comm"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;

 private:
  QTableWidget* table_;
  CommChart* chart_;
};

}  // namespace kiln::studio
