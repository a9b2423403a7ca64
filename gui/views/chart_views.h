// The views that are drawn rather than tabulated: the memory timeline
// (live bytes over the schedule stacked by category -- parameters,
// optimizer state, gradients, activations, ... -- or the largest tensors as
// bands of their own; the peak and the budget marked, the nodes and tensors
// the remat pass recomputes marked; hovering names what is under the
// cursor; beside it the peak by category) and the communication view (per
// bucket dense against sent bytes, and a row per step of compute and
// communication).
#pragma once

#include <QComboBox>
#include <QTableWidget>
#include <functional>

#include "gui/views/view.h"

namespace kiln::studio {

/// The timeline drawing, a widget of its own so it can be rendered alone.
class MemoryChart : public QWidget {
 public:
  /// Stacked by category (reports with memory.categories), or the largest
  /// tensors as bands over the total.
  enum class Mode { Categories, Tensors };
  explicit MemoryChart(QWidget* parent = nullptr);
  void setMode(Mode m);
  Mode mode() const { return mode_; }
  /// Whether the open report has categories (else only Tensors is drawn).
  bool hasCategories() const { return !category_names_.empty(); }
  /// Per category (memory.categories' order): live bytes at each node.
  const std::vector<std::vector<double>>& categoryTimelines() const { return category_lines_; }
  const std::vector<QString>& categoryNames() const { return category_names_; }
  /// Called with the node under a click (the graph view selects it).
  std::function<void(int)> on_node_clicked;
  /// The node index at `pos` on the time axis, -1 outside the plot.
  int nodeAt(QPoint pos) const;
  void setDocument(std::shared_ptr<const StudioDocument> doc);
  /// The tensor drawn at `pos` ("" where none): what the tooltip says.
  QString describeAt(QPoint pos) const;
  /// The keyboard's cursor: Left/Right (Home/End) move it node by node,
  /// Enter selects its node as a click would; -1 before the first key.
  int cursorNode() const { return cursor_; }

 protected:
  void paintEvent(QPaintEvent*) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;

 private:
  struct Band {
    QString name, producer, scope;
    int64_t first = 0, last = 0;
    double bytes = 0;
    bool remat = false;  ///< recomputed by the remat pass (hatched)
  };
  QRectF plotArea() const;
  void paintCategories(QPainter& p, const std::function<double(double)>& x, const std::function<double(double)>& y);
  void paintBands(QPainter& p, const std::function<double(double)>& x, const std::function<double(double)>& y);
  Mode mode_ = Mode::Categories;
  std::vector<QString> category_names_;
  std::vector<std::vector<double>> category_lines_;
  std::shared_ptr<const StudioDocument> doc_;
  std::vector<double> timeline_;
  std::vector<Band> bands_;  ///< largest tensors, drawn on the bottom, largest first
  double peak_ = 0, budget_ = 0;
  int64_t peak_node_ = 0;
  std::vector<int64_t> remat_nodes_;  ///< nodes that recompute a value (marked under the axis)
  int cursor_ = -1;

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
  /// The peak by category: category, bytes, share.
  QTableWidget* peakTable() const { return peak_table_; }
  QTableWidget* csvTable() override { return peak_table_; }
  /// Stack by category (true) or show the largest tensors (false).
  void showCategories(bool on);

 private:
  MemoryChart* chart_;
  QTableWidget* peak_table_;
  QComboBox* stack_by_;
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
  QTableWidget* csvTable() override { return table_; }

 private:
  QTableWidget* table_;
  CommChart* chart_;
};

}  // namespace kiln::studio
