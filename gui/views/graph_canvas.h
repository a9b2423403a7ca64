// A graph drawn the way kiln-studio draws graphs: folded by module scope
// when large (driver/scope_folding.h; a double-click on a folded scope opens
// it, on a node folds its scope back), laid out by Graphviz (dot) on a
// worker thread with a Cancel, drawn in a QGraphicsScene with wheel zoom,
// drag to pan and fit. The graph view shows the step with it; the passes
// view shows a pass's before and after side by side.
#pragma once

#include <QElapsedTimer>
#include <QFutureWatcher>
#include <QGraphicsView>
#include <QLabel>
#include <QPushButton>
#include <QTimer>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/ir.h"
#include "driver/scope_folding.h"

namespace kiln::studio {

/// Node and edge positions in points (Graphviz "plain" output scaled).
struct GraphLayout {
  struct Box {
    QString id;  ///< the DOT node name ("i<item>")
    QRectF rect;
    QString label;
  };
  std::vector<Box> boxes;
  std::vector<QPolygonF> edges;
  QString error;
};

/// Parse Graphviz's "plain" output (exposed for tests).
GraphLayout parsePlainLayout(const std::string& plain);

/// The DOT the canvas lays out for a folded graph (`nodes`: the graph's, by
/// index): a box per item, nodes drawn alone in a cluster of their scope so
/// a scope's nodes stay together, each edge once (exposed for the layout
/// benchmark).
std::string foldedDot(const driver::FoldedGraph& f, const std::vector<const Node*>& nodes);

class GraphCanvas : public QWidget {
 public:
  /// Graphs with more nodes than this open folded (Graphviz lays out a few
  /// hundred boxes in well under a second, a thousand in minutes)...
  static constexpr size_t kFoldAbove = 150;
  /// ...into at most this many boxes: a block per layer and part.
  static constexpr size_t kMaxItems = 60;

  explicit GraphCanvas(QWidget* parent = nullptr);

  /// Show `g` (not owned; nullptr clears), folded by defaultOpenScopes.
  void setGraph(const Graph* g);
  const Graph* graph() const { return graph_; }
  /// Fill colour of each node (by index); folded scopes take a light grey.
  void setNodeColour(std::function<QColor(int node)> colour);
  /// Re-colour the drawn boxes (after the colour function changed).
  void recolour();
  /// Colour by a number per node instead (a metric overlay: measured time,
  /// flops, bytes, memory): nodes drawn alone by theirs, a folded scope by
  /// its members' sum (or maximum, with `max_for_folds`), on one scale from
  /// white to red whose top is the largest drawn box, so the heaviest scope
  /// shows at a glance. An empty vector goes back to the colour function.
  void setNodeValues(std::vector<double> values, bool max_for_folds = false);
  /// The value a drawn item stands for (0 without values): what its colour says.
  double itemValue(size_t item) const { return item < item_values_.size() ? item_values_[item] : 0; }
  /// The largest of them: the scale's top.
  double maxItemValue() const { return max_item_value_; }
  /// A coloured frame around these nodes (index -> colour; empty: none); a
  /// folded scope takes its first marked member's. Once laid out, the view
  /// shows the first marked box at a readable size instead of the whole graph.
  void setMarks(std::vector<QColor> marks);

  /// Select node `node` (its index): its box, or its folded scope's; with
  /// `reveal`, open its scopes first (a new layout; selected when drawn).
  void select(int node, bool reveal = false);
  int selectedNode() const { return selected_; }
  /// Told the node a click selected (its first node for a folded scope).
  std::function<void(int node)> on_selected;
  /// Keyboard navigation from the selected node: Left/Right the previous or
  /// next node in schedule order, Up the producer of its first input, Down
  /// the first node reading it (scopes open to show them), Enter opens the
  /// folded scope it is in or folds its scope. False: not such a key, or
  /// nothing selected (the view scrolls).
  bool navigate(int key);
  /// Told the status line (layout progress, node counts, errors).
  std::function<void(const QString&)> on_status;
  /// Told when a layout has been drawn.
  std::function<void()> on_laid_out;

  /// Open a folded scope / fold an open one back (a new layout).
  void openScope(const std::string& scope);
  void closeScope(const std::string& scope);
  const std::set<std::string>& openScopes() const { return open_; }
  const driver::FoldedGraph& folded() const { return folded_; }

  void waitForLayout();
  void cancelLayout();
  bool layoutRunning() const { return watcher_->isRunning(); }
  void fit();
  /// The whole graph when it fits readably, else the start of it at the
  /// smallest readable scale (what a new layout shows).
  void showOverview();
  /// Readable size, centred on the first marked box (false when none is drawn).
  bool showFirstMark();
  QGraphicsView* view() const { return view_; }
  /// Boxes drawn: nodes alone and folded scopes.
  size_t drawnItems() const { return item_boxes_.size(); }
  /// Nodes drawn alone.
  size_t drawnNodes() const;
  QString status() const { return status_->text(); }

 private:
  void relayout();
  void showLayout(const GraphLayout& layout, int generation);
  QColor fillOf(size_t item) const;
  /// item_values_ and max_item_value_ for folded_ and values_.
  void computeItemValues();
  void setStatus(const QString& s);

  const Graph* graph_ = nullptr;
  std::vector<const Node*> nodes_;
  std::set<std::string> open_;
  driver::FoldedGraph folded_;
  std::function<QColor(int)> colour_;
  std::vector<QColor> marks_;
  std::vector<double> values_;       ///< per node (setNodeValues); empty: colour_
  bool max_for_folds_ = false;
  std::vector<double> item_values_;  ///< per item of folded_
  double max_item_value_ = 0;
  QGraphicsScene* scene_;
  QGraphicsView* view_;
  QLabel* status_;
  QPushButton* cancel_;
  QFutureWatcher<GraphLayout>* watcher_;
  QTimer* ticker_;                              ///< updates the status while a layout runs
  QElapsedTimer layout_clock_;                  ///< since the running layout started
  int generation_ = 0;                          ///< bumped by every layout and cancel; a stale result is dropped
  int running_generation_ = -1;                 ///< the generation of the watcher's future (-1: none yet)
  int shown_generation_ = -1;                   ///< the last generation drawn (showLayout draws each once)
  std::vector<QGraphicsRectItem*> item_boxes_;  ///< by item index (nullptr until drawn)
  int selected_ = -1;
  int pending_select_ = -1;  ///< selected when the running layout is drawn
};

}  // namespace kiln::studio
