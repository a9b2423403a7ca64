// The graph view: the step graph in a GraphCanvas (folded by module scope
// when large, laid out off the GUI thread), a find box over op, scope,
// value names and types (Enter: next, Shift+Enter: previous; a match inside
// a folded scope opens it), colouring by op kind, by the kernel's dialect or
// by a metric (measured time, flops, bytes, memory at the node; folded
// scopes by their sum), and a side panel with the selected node's op,
// attributes, types, scope, provenance, kernel, flops and bytes.
#pragma once

#include <QComboBox>
#include <QLineEdit>
#include <QTextEdit>

#include "gui/views/graph_canvas.h"
#include "gui/views/view.h"

namespace kiln::studio {

/// A node's fill colour by its op kind (matmuls, fused, reductions, ...).
QColor opKindColour(const Node& n);

class GraphView : public View {
 public:
  explicit GraphView(QWidget* parent = nullptr);
  QString name() const override { return "graph"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
  QWidget* renderTarget() override { return canvas_->view(); }

  GraphCanvas* canvas() const { return canvas_; }
  /// Block until the layout running on the worker thread is drawn (tests,
  /// --screenshot).
  void waitForLayout() { canvas_->waitForLayout(); }
  /// Select the next (previous) node matching `text` (op, scope, value name
  /// or type), opening its folded scope; returns its index, -1 when none.
  int findNext(const QString& text, bool backwards = false);
  void fit() { canvas_->fit(); }
  void focusFind() { find_->setFocus(); }
  void cancelLayout() { canvas_->cancelLayout(); }
  int selectedNode() const { return selected_; }
  /// Select node `node` (its index in the graph), centre it, show its details.
  void select(int node);
  /// How nodes are coloured: by op kind, by their kernel's dialect, or by a
  /// metric (white to red; a folded scope by its members' sum, memory by
  /// their maximum): measured time per step, flops, bytes moved, or the
  /// bytes live while the node runs.
  enum class Colouring { OpKind, Dialect, Time, Flops, Bytes, Memory };
  void colourBy(Colouring c);
  Colouring colouring() const { return Colouring(colouring_->currentIndex()); }
  /// Colour the nodes by op kind (false) or by the dialect of their kernel.
  void colourByDialect(bool by_dialect) { colourBy(by_dialect ? Colouring::Dialect : Colouring::OpKind); }
  QString status() const { return canvas_->status(); }
  /// "dialects: cpu ..." when coloured by dialect; find's "no node matches".
  QString legend() const { return legend_->text(); }
  size_t drawnNodes() const { return canvas_->drawnNodes(); }

 private:
  QString describe(int node) const;
  void colourByMetric(Colouring c);
  /// "measured time per step: white 0 to 64.9 us (the largest box ...)".
  QString metricLegend(Colouring c) const;

  std::shared_ptr<const StudioDocument> doc_;
  std::vector<const Node*> nodes_;
  GraphCanvas* canvas_;
  QLineEdit* find_;
  QComboBox* colouring_;
  QLabel* legend_;
  QTextEdit* details_;
  int selected_ = -1;
};

}  // namespace kiln::studio
