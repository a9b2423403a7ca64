#include "gui/views/table_view.h"

#include <QHeaderView>
#include <QVBoxLayout>

#include "driver/messages.h"
#include "driver/provenance_paths.h"

namespace kiln::studio {
namespace {

QString op(const std::string& node) {
  return QString::fromStdString(node.substr(0, node.find(' ')));
}

}  // namespace

NumberItem::NumberItem(double value, const std::string& unit) {
  QString text;
  if (unit == "%") {
    text = QString::fromStdString(driver::formatQuantity(value, "")) + " %";
  } else {
    text = QString::fromStdString(driver::formatQuantity(value, unit));
  }
  setText(text);
  setData(Qt::UserRole, value);
  setData(kUnitRole, QString::fromStdString(unit));
  setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
}

bool NumberItem::operator<(const QTableWidgetItem& other) const {
  const QVariant mine = data(Qt::UserRole), theirs = other.data(Qt::UserRole);
  if (mine.isValid() && theirs.isValid()) return mine.toDouble() < theirs.toDouble();
  if (!mine.isValid() && !theirs.isValid()) return QTableWidgetItem::operator<(other);  // text, or a plain number
  return mine.isValid();  // numbers before "-"
}

void setUpTable(QTableWidget* t) {
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->verticalHeader()->setVisible(false);
  t->horizontalHeader()->setStretchLastSection(true);
}

void setHeaderTips(QTableWidget* t, const std::map<QString, QString>& tips) {
  for (int c = 0; c < t->columnCount(); ++c)
    if (QTableWidgetItem* h = t->horizontalHeaderItem(c))
      if (auto it = tips.find(h->text()); it != tips.end()) h->setToolTip(it->second);
}

TableView::TableView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  table_ = new QTableWidget(this);
  table_->setSortingEnabled(true);
  setUpTable(table_);
  layout->addWidget(summary_);
  layout->addWidget(table_);
}

void TableView::fill(const QStringList& columns, const std::vector<std::vector<QVariant>>& rows,
                     const QString& summary, const std::vector<std::string>& units) {
  table_->setSortingEnabled(false);
  table_->clear();
  table_->setColumnCount(static_cast<int>(columns.size()));
  table_->setHorizontalHeaderLabels(columns);
  table_->setRowCount(static_cast<int>(rows.size()));
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < rows[r].size(); ++c) {
      QTableWidgetItem* item = nullptr;
      if (c < units.size() && !units[c].empty() && rows[r][c].typeId() == QMetaType::Double) {
        item = new NumberItem(rows[r][c].toDouble(), units[c]);
      } else {
        item = new NumberItem(0, "");  // sorts "-" after the numbers
        item->setData(Qt::UserRole, QVariant());
        item->setData(Qt::DisplayRole, rows[r][c]);  // numbers sort as numbers
        item->setTextAlignment(Qt::AlignLeft | Qt::AlignVCenter);
      }
      table_->setItem(static_cast<int>(r), static_cast<int>(c), item);
    }
  table_->setSortingEnabled(true);
  table_->resizeColumnsToContents();
  summary_->setText(summary);
}

void KernelsView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  std::vector<std::vector<QVariant>> rows;
  full_names_.clear();
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
    // Source paths relative to the directory they share (the full node in the tooltip).
    std::vector<std::string> names;
    for (const driver::ReportKernel& k : kernels) names.push_back(k.node);
    const std::string dir = driver::commonSourceDir(names);
    for (size_t i = 0; i < kernels.size(); ++i) {
      const driver::ReportKernel& k = kernels[i];
      full_names_.push_back(QString::fromStdString(k.node));
      rows.push_back({int(i), QString::fromStdString(driver::relativeToDir(k.node, dir)), op(k.node),
                      QString::fromStdString(k.dialect),
                      QString::fromStdString(k.kernel), qlonglong(k.stage), ms[i] >= 0 ? QVariant(ms[i]) : QVariant("-"),
                      ms[i] >= 0 && total > 0 ? QVariant(100.0 * ms[i] / total) : QVariant("-")});
    }
    const driver::ReportExecution& execution = doc->report().execution;
    const qlonglong stages = execution.stages;
    if (measured)
      summary = QString(
                    "%1 nodes, %2 stages. Times measured while training, per step, averaged over %3 steps; "
                    "%4 in kernels per step (nodes of a shared stage overlap).")
                    .arg(kernels.size())
                    .arg(stages)
                    .arg(qlonglong(execution.profiled_steps.value_or(0)))
                    .arg(QString::fromStdString(driver::formatQuantity(total, "ms")));
    else
      summary = QString(
                    "%1 nodes, %2 stages. No measured times: Run > Measure (Ctrl+R) or kiln train --report "
                    "times every node (steps after the first); --autotune times each node's candidate kernels.")
                    .arg(kernels.size())
                    .arg(stages);
  }
  fill({"#", "node", "op", "dialect", "kernel", "stage", "time", "share"}, rows, summary,
       {"", "", "", "", "", "", "ms", "%"});
  setHeaderTips(table(), {{"stage", "the nodes of one stage run at the same time"},
                          {"time", "per step: measured while training (kiln train --report), else the --autotune "
                                   "time of the bound kernel"},
                          {"share", "of the kernels' summed time per step"},
                          {"dialect", "the kernel family: onednn, blas, cpu (Kiln's own), cuda, ..."}});
  table()->setColumnWidth(1, std::min(table()->columnWidth(1), 520));  // the times stay in sight
  for (int r = 0; r < table()->rowCount(); ++r) {
    const int node = table()->item(r, 0)->data(Qt::DisplayRole).toInt();
    if (node >= 0 && node < int(full_names_.size())) table()->item(r, 1)->setToolTip(full_names_[size_t(node)]);
  }
  // The most expensive nodes first when there are times, else graph order.
  table()->sortByColumn(timed ? 6 : 0, timed ? Qt::DescendingOrder : Qt::AscendingOrder);
}

void KernelsView::selectNode(int node) {
  for (int r = 0; r < table()->rowCount(); ++r)
    if (table()->item(r, 0)->data(Qt::DisplayRole).toInt() == node) {
      table()->selectRow(r);
      table()->scrollToItem(table()->item(r, 0));
      return;
    }
}

}  // namespace kiln::studio
