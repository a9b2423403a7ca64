// Views that are a sortable table over part of the report: kernels (node ->
// op -> dialect -> kernel -> stage -> measured time -> share), and the pass
// pipeline (views/passes_view.h). A summary line above the table says what
// the numbers are.
#pragma once

#include <QLabel>
#include <QTableWidget>
#include <map>
#include <string>
#include <vector>

#include "gui/views/view.h"

namespace kiln::studio {

/// A table cell that shows a number with three significant digits and its
/// unit ("41.2 us", "1.10 GB", "8.42 %") and sorts by the number itself
/// (Qt::UserRole); its unit is kept in kUnitRole (CSV export names it).
class NumberItem : public QTableWidgetItem {
 public:
  static constexpr int kUnitRole = Qt::UserRole + 2;
  /// `unit`: "ms", "B", "FLOP", "%" or "" (a plain number).
  NumberItem(double value, const std::string& unit);
  bool operator<(const QTableWidgetItem& other) const override;
};

/// Tooltips for column titles (the abbreviations and units they use).
void setHeaderTips(QTableWidget* t, const std::map<QString, QString>& tips);

/// A view's table as every view shows one: read-only, whole rows selected,
/// no row numbers, the last column stretched to the edge.
void setUpTable(QTableWidget* t);

class TableView : public View {
 public:
  explicit TableView(QWidget* parent = nullptr);
  QTableWidget* table() const { return table_; }
  QTableWidget* csvTable() override { return table_; }

 protected:
  /// Fill the table: column titles, rows of cells (numbers sort as
  /// numbers). A double in a column with a unit (`units`, by column) shows
  /// as a NumberItem.
  void fill(const QStringList& columns, const std::vector<std::vector<QVariant>>& rows, const QString& summary,
            const std::vector<std::string>& units = {});

 private:
  QLabel* summary_;
  QTableWidget* table_;
};

class KernelsView : public TableView {
 public:
  using TableView::TableView;
  QString name() const override { return "kernels"; }
  void setDocument(std::shared_ptr<const StudioDocument> doc) override;
  /// Select node `node`'s row (the table keeps its sorting) and scroll to it.
  void selectNode(int node);

 private:
  std::vector<QString> full_names_;  ///< each node with its absolute source paths (tooltips)
};

}  // namespace kiln::studio
