// The passes view: the pipeline as a table (per pass: time, changed, nodes,
// node delta, flops, estimated peak, statistics), and for the selected pass
// the graph before and after it side by side (added nodes framed green,
// removed red, changed orange; a click on one side selects the node's
// counterparts on the other, matched by value numbers, data flow and
// provenance: driver/graph_diff.h) and the text IR diff. The graphs need the
// report's pass IR (kiln compile --report-pass-ir, or a model opened in
// kiln-studio).
#pragma once

#include <QPlainTextEdit>
#include <QTabWidget>
#include <memory>
#include <optional>

#include "driver/graph_diff.h"
#include "gui/views/graph_canvas.h"
#include "gui/views/table_view.h"

namespace kiln::studio {

class PassesView : public TableView {
 public:
  explicit PassesView(QWidget* parent = nullptr);
  QString name() const override { return "passes"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;

  /// Show pass `index` (pipeline order) before and after; false when there
  /// is no such pass or no pass IR.
  bool showPass(size_t index);
  /// The first pass named `name`; -1 when none.
  int passIndex(const QString& name) const;
  int shownPass() const { return shown_; }
  GraphCanvas* before() const { return before_; }
  GraphCanvas* after() const { return after_; }
  const driver::GraphDiff& diff() const { return diff_; }
  QString diffText() const { return ir_diff_->toPlainText(); }
  QString headline() const { return headline_->text(); }
  /// Wait for both layouts (tests, --screenshot).
  void waitForLayout();

 private:
  std::shared_ptr<const StudioDocument> doc_;
  QLabel* headline_;
  QTabWidget* tabs_;
  GraphCanvas* before_;
  GraphCanvas* after_;
  QPlainTextEdit* ir_diff_;
  std::optional<driver::PassGraph> before_graph_, after_graph_;
  driver::GraphDiff diff_;
  int shown_ = -1;
  int reveal_tries_ = 0;  ///< layouts left to open the first change's scopes in
};

}  // namespace kiln::studio
