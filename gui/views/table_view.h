// Views that are a sortable table over part of the report: kernels (node ->
// op -> dialect -> kernel -> stage -> measured time -> share), and the pass
// pipeline (views/passes_view.h). A summary line above the table says what
// the numbers are.
#pragma once

#include <QLabel>
#include <QTableWidget>

#include "gui/views/view.h"

namespace kiln::studio {

class TableView : public View {
 public:
  explicit TableView(QWidget* parent = nullptr);
  QTableWidget* table() const { return table_; }

 protected:
  /// Fill the table: column titles, rows of cells (numbers sort as numbers).
  void fill(const QStringList& columns, const std::vector<std::vector<QVariant>>& rows, const QString& summary);

 private:
  QLabel* summary_;
  QTableWidget* table_;
};

class KernelsView : public TableView {
 public:
  using TableView::TableView;
  QString name() const override { return "kernels"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
};

}  // namespace kiln::studio
