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
    const auto& kernels = doc->kernels();
    // Each node's time: measured in training (kiln train --report), else
    // its bound kernel's --autotune time.
    std::vector<double> ms;
    bool measured = false;
    for (const driver::ReportKernel& k : kernels) {
      double t = -1;
      if (k.measured_ms) {
        t = *k.measured_ms;
        measured = true;
      } else {
        for (const driver::ReportTiming& c : k.autotune)
          if (c.kernel == k.kernel) t = c.millis;
      }
      ms.push_back(t);
    }
    double total = 0;
    for (double t : ms) total += std::max(t, 0.0);
    timed = total > 0;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const driver::ReportKernel& k = kernels[i];
      rows.push_back({int(i), QString::fromStdString(k.node), op(k.node), QString::fromStdString(k.dialect),
                      QString::fromStdString(k.kernel), qlonglong(k.stage), ms[i] >= 0 ? QVariant(ms[i]) : QVariant("-"),
                      ms[i] >= 0 && total > 0 ? QVariant(100.0 * ms[i] / total) : QVariant("-")});
    }
    const driver::ReportExecution& execution = doc->report().execution;
    const qlonglong stages = execution.stages;
    if (measured)
      summary = QString(
                    "%1 nodes, %2 stages. Times measured while training, per step, averaged over %3 steps; "
                    "%4 ms in kernels per step (nodes of a shared stage overlap).")
                    .arg(kernels.size())
                    .arg(stages)
                    .arg(qlonglong(execution.profiled_steps.value_or(0)))
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
