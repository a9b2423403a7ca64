#include "gui/views/table_view.h"

#include <QHeaderView>
#include <QVBoxLayout>

namespace kiln::studio {
namespace {

QString op(const std::string& node) {
  return QString::fromStdString(node.substr(0, node.find(' ')));
}

}  // namespace

TableView::TableView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  table_ = new QTableWidget(this);
  table_->setSortingEnabled(true);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->setVisible(false);
  layout->addWidget(summary_);
  layout->addWidget(table_);
}

void TableView::fill(const QStringList& columns, const std::vector<std::vector<QVariant>>& rows,
                     const QString& summary) {
  table_->setSortingEnabled(false);
  table_->clear();
  table_->setColumnCount(static_cast<int>(columns.size()));
  table_->setHorizontalHeaderLabels(columns);
  table_->setRowCount(static_cast<int>(rows.size()));
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < rows[r].size(); ++c) {
      auto* item = new QTableWidgetItem;
      item->setData(Qt::DisplayRole, rows[r][c]);  // numbers sort as numbers
      table_->setItem(static_cast<int>(r), static_cast<int>(c), item);
    }
  table_->setSortingEnabled(true);
  table_->resizeColumnsToContents();
  summary_->setText(summary);
}

void KernelsView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  std::vector<std::vector<QVariant>> rows;
  QString summary = "No report open.";
  if (doc) {
    const nlohmann::json& r = doc->report();
    const nlohmann::json kernels = r.value("kernels", nlohmann::json::array());
    double timed = 0;
    for (const auto& k : kernels)
      if (k.contains("autotune"))
        for (const auto& t : k["autotune"])
          if (t.value("kernel", "") == k.value("kernel", "")) timed += t.value("millis", 0.0);
    int index = 0;
    for (const auto& k : kernels) {
      double ms = -1;
      if (k.contains("autotune"))
        for (const auto& t : k["autotune"])
          if (t.value("kernel", "") == k.value("kernel", "")) ms = t.value("millis", -1.0);
      const std::string node = k.value("node", "");
      rows.push_back({index++, QString::fromStdString(node), op(node), QString::fromStdString(k.value("dialect", "")),
                      QString::fromStdString(k.value("kernel", "")), k.value("stage", 0),
                      ms >= 0 ? QVariant(ms) : QVariant("-"),
                      ms >= 0 && timed > 0 ? QVariant(100.0 * ms / timed) : QVariant("-")});
    }
    summary = QString(
                  "%1 nodes, %2 stages. Measured times come from --autotune (each node's bound kernel, "
                  "timed alone on its shapes); without it the columns show -.")
                  .arg(kernels.size())
                  .arg(r.contains("execution") ? r["execution"].value("stages", 0) : 0);
  }
  fill({"#", "node", "op", "dialect", "kernel", "stage", "ms", "share %"}, rows, summary);
}

}  // namespace kiln::studio
