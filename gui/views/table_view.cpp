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
  bool timed = false;
  if (doc) {
    const nlohmann::json& r = doc->report();
    const nlohmann::json& kernels = doc->kernels();
    // Each node's time: measured in training (kiln train --report), else
    // its bound kernel's --autotune time.
    std::vector<double> ms;
    bool measured = false;
    for (const auto& k : kernels) {
      double t = -1;
      if (!k.is_object()) {
        ms.push_back(t);
        continue;
      }
      if (k.contains("measured_ms") && k["measured_ms"].is_number()) {
        t = k["measured_ms"].get<double>();
        measured = true;
      } else if (k.contains("autotune") && k["autotune"].is_array()) {
        for (const auto& c : k["autotune"])
          if (c.is_object() && c.value("kernel", "") == k.value("kernel", "")) t = c.value("millis", -1.0);
      }
      ms.push_back(t);
    }
    double total = 0;
    for (double t : ms) total += std::max(t, 0.0);
    timed = total > 0;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const nlohmann::json& k = kernels[i];
      const std::string node = k.is_object() ? k.value("node", "") : "";
      rows.push_back({int(i), QString::fromStdString(node), op(node),
                      QString::fromStdString(k.is_object() ? k.value("dialect", "") : ""),
                      QString::fromStdString(k.is_object() ? k.value("kernel", "") : ""),
                      k.is_object() ? k.value("stage", 0) : 0, ms[i] >= 0 ? QVariant(ms[i]) : QVariant("-"),
                      ms[i] >= 0 && total > 0 ? QVariant(100.0 * ms[i] / total) : QVariant("-")});
    }
    const nlohmann::json execution = r.value("execution", nlohmann::json::object());
    const int stages = execution.is_object() ? execution.value("stages", 0) : 0;
    if (measured)
      summary = QString(
                    "%1 nodes, %2 stages. Times measured while training, per step, averaged over %3 steps; "
                    "%4 ms in kernels per step (nodes of a shared stage overlap).")
                    .arg(kernels.size())
                    .arg(stages)
                    .arg(execution.is_object() ? execution.value("profiled_steps", 0) : 0)
                    .arg(total, 0, 'f', 3);
    else
      summary = QString(
                    "%1 nodes, %2 stages. No measured times: Run > Measure (Ctrl+R) or kiln train --report "
                    "times every node (steps after the first); --autotune times each node's candidate kernels.")
                    .arg(kernels.size())
                    .arg(stages);
  }
  fill({"#", "node", "op", "dialect", "kernel", "stage", "ms", "share %"}, rows, summary);
  table()->setColumnWidth(1, std::min(table()->columnWidth(1), 520));  // the times stay in sight
  // The most expensive nodes first when there are times, else graph order.
  table()->sortByColumn(timed ? 6 : 0, timed ? Qt::DescendingOrder : Qt::AscendingOrder);
}

}  // namespace kiln::studio
