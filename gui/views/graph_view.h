// The graph view: the step graph laid out by Graphviz (dot) on a worker
// thread, drawn in a QGraphicsScene (zoom with the wheel, pan by dragging,
// fit), nodes coloured by op kind, a find box over op, scope, value names
// and types (Enter: next match), colouring by op kind or by the kernel's
// dialect, and a side panel with the selected node's
// op, attributes, types, scope, provenance, kernel, flops and bytes.
#pragma once

#include <QComboBox>
#include <QFutureWatcher>
#include <QGraphicsView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTextEdit>
#include <vector>

#include "gui/views/view.h"

namespace kiln::studio {

/// Node and edge positions in points (Graphviz "plain" output scaled).
struct GraphLayout {
  struct Box {
    QString id;  ///< "n<index>" for nodes, "in<id>"/"out<k>" for graph inputs/outputs
    QRectF rect;
    QString label;
  };
  std::vector<Box> boxes;
  std::vector<QPolygonF> edges;
  QString error;
};

/// Parse Graphviz's "plain" output (exposed for tests).
GraphLayout parsePlainLayout(const std::string& plain);

class GraphView : public View {
 public:
  explicit GraphView(QWidget* parent = nullptr);
  QString name() const override { return "graph"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
  QWidget* renderTarget() override { return view_; }

  /// Block until the layout running on the worker thread is drawn (tests,
  /// --screenshot).
  void waitForLayout();
  /// Select the next node matching `text` (op, scope, value name or type);
  /// returns its index, -1 when none matches.
  int findNext(const QString& text);
  void fit();
  /// Drop the layout running on the worker thread: nothing is drawn.
  void cancelLayout();
  int selectedNode() const { return selected_; }
  /// Select node `node` (its index in the graph), centre it, show its details.
  void select(int node);
  /// Colour the nodes by op kind (false) or by the dialect of their kernel.
  void colourByDialect(bool by_dialect);
  /// The status line (node count, layout progress or error, dialect legend).
  QString status() const { return status_->text(); }
  size_t drawnNodes() const { return node_items_.size(); }

 private:
  void showLayout(const GraphLayout& layout);
  QString describe(int node) const;

  std::shared_ptr<const StudioDocument> doc_;
  QGraphicsScene* scene_;
  QGraphicsView* view_;
  QLineEdit* find_;
  QLabel* status_;
  QComboBox* colouring_;
  QPushButton* cancel_;  ///< abandons a layout still running (Graphviz cannot stop; its result is dropped)
  bool cancelled_ = false;
  QTextEdit* details_;
  QFutureWatcher<GraphLayout>* watcher_;
  std::vector<QGraphicsItem*> node_items_;  ///< by node index
  int selected_ = -1;
};

}  // namespace kiln::studio
