// Two reports side by side (File > Compare, `kiln-studio A.json B.json`):
// the comparison `kiln compare-reports` prints (driver/report_compare.h) as
// tables, a summary with B/A, the time differences by op, scope and node
// (largest first), the passes, and the two final graphs diffed with the
// passes view's matcher (driver/graph_diff.h) plus their text IR diff.
#pragma once

#include <QLabel>
#include <QPlainTextEdit>
#include <QTabWidget>
#include <QTableWidget>
#include <memory>

#include "driver/graph_diff.h"
#include "driver/report_compare.h"
#include "gui/views/view.h"

namespace kiln::studio {

class CompareView : public View {
 public:
  explicit CompareView(QWidget* parent = nullptr);
  QString name() const override { return "compare"; }
  /// The open document alone has nothing to compare: shows how to start.
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
  /// Compare `b` with `a` (the baseline).
  void setComparison(std::shared_ptr<const StudioDocument> a, std::shared_ptr<const StudioDocument> b);

  const driver::ReportComparison& comparison() const { return comparison_; }
  QTableWidget* summaryTable() const { return summary_; }
  /// "op", "scope", "node", "passes".
  QTableWidget* table(const QString& which) const;
  /// The tab in sight's table (the summary's when the graphs tab is).
  QTableWidget* csvTable() override;
  /// The final graphs' diff (counts valid when both reports carry graph.ir).
  const driver::GraphDiff& graphDiff() const { return graph_diff_; }
  QString headline() const { return headline_->text(); }

 private:
  void fillDeltas(QTableWidget* t, const std::vector<driver::TimeDelta>& rows);
  void fillPasses();
  void fillGraphs(const StudioDocument& a, const StudioDocument& b);

  QLabel* headline_;
  QTableWidget* summary_;
  QTabWidget* tabs_;
  QTableWidget *by_op_, *by_scope_, *by_node_, *passes_;
  QLabel* graph_summary_;
  QPlainTextEdit* graph_text_;
  driver::ReportComparison comparison_;
  driver::GraphDiff graph_diff_;
};

}  // namespace kiln::studio
