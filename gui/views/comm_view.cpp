// The communication view (chart_views.h): report.communication, the last
// step's collectives in a table (dense against sent bytes, collective,
// algorithm, time, hidden share) and every step as a row of compute and
// communication time with the hidden part.
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "gui/views/chart_views.h"
#include "gui/views/table_view.h"

namespace kiln::studio {
namespace {


const std::vector<driver::CommStep>* steps(const std::shared_ptr<const StudioDocument>& doc) {
  if (!doc || !doc->report().communication) return nullptr;
  const auto& s = doc->report().communication->steps;
  return s.empty() ? nullptr : &s;
}

}  // namespace

CommChart::CommChart(QWidget* parent) : QWidget(parent) {
  setMinimumSize(400, 160);
}

void CommChart::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  update();
}

void CommChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  const auto* all = steps(doc_);
  if (!all) {
    p.drawText(rect(), Qt::AlignCenter,
               "No data-parallel communication in this report (kiln train --nproc N --report).\n"
               "Run > Measure (Ctrl+R) trains the model 5 steps on 2 ranks to fill it.");
    return;
  }
  double longest = 1;
  for (const auto& s : *all) longest = std::max(longest, s.step_ms);
  const double left = 70, right = width() - 20, row = std::min(24.0, (height() - 30.0) / double(all->size()));
  auto x = [&](double ms) { return left + (right - left) * ms / longest; };
  for (size_t i = 0; i < all->size(); ++i) {
    const driver::CommStep& s = (*all)[i];
    const double top = 20 + row * double(i), h = row * 0.7;
    const double step = s.step_ms, comm = s.commMillis(), exposed = s.exposedMillis();
    p.setPen(Qt::black);
    p.drawText(QRectF(0, top, left - 6, h), Qt::AlignRight | Qt::AlignVCenter, QString("step %1").arg(i));
    p.fillRect(QRectF(x(0), top, x(step) - x(0), h / 2), QColor(0x4e, 0x79, 0xa7));          // the step
    p.fillRect(QRectF(x(0), top + h / 2, x(comm) - x(0), h / 2), QColor(0xf2, 0x8e, 0x2b));  // communication
    const double waited = std::min(exposed, comm);  // the step also waits for collectives still queued
    p.fillRect(QRectF(x(comm - waited), top + h / 2, x(waited) - x(0), h / 2),
               QColor(0xe1, 0x57, 0x59));  // the part the step waited for
  }
  p.setPen(Qt::black);
  p.drawText(
      QRectF(left, 0, right - left, 18), Qt::AlignLeft,
      QString("blue: step, orange: communication (hidden), red: exposed; full width %1 ms").arg(longest, 0, 'f', 1));
}

CommView::CommView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  table_ = new QTableWidget(this);
  table_->setSortingEnabled(true);
  setUpTable(table_);
  chart_ = new CommChart(this);
  layout->addWidget(new QLabel("The last step's collectives (bytes sent by rank 0):", this));
  layout->addWidget(table_, 1);
  layout->addWidget(chart_, 1);
}

void CommView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  chart_->setDocument(doc);
  table_->setSortingEnabled(false);
  table_->clear();
  const QStringList columns = {"bucket", "collective", "algorithm", "tensors", "dense",
                               "sent",   "sent/dense", "time",      "hidden"};
  table_->setColumnCount(static_cast<int>(columns.size()));
  table_->setHorizontalHeaderLabels(columns);
  setHeaderTips(table_,
                {{"bucket", "the gradient bucket; \"loss\": the allreduce of the loss and metrics (no bucket)"},
                 {"dense", "what a dense allreduce of the bucket moves"},
                 {"sent", "what rank 0 sent (sparse exchanges send less)"},
                 {"sent/dense", "sent as a share of dense"},
                 {"time", "from the collective's start to its end, on the communication thread"},
                 {"hidden", "the share of that time the executor did not wait for (overlapped with compute)"}});
  const auto* all = steps(doc);
  const std::vector<CollectiveRecord> none;
  const std::vector<CollectiveRecord>& last = all ? all->back().collectives : none;
  table_->setRowCount(static_cast<int>(last.size()));
  int r = 0;
  for (const CollectiveRecord& c : last) {
    const double dense = double(c.dense_bytes), sent = double(c.sent_bytes);
    const double ms = c.end_ms - c.begin_ms, waited = c.waited_ms;
    // The loss and metrics travel in no bucket: said in words, not as -1.
    auto* bucket = c.bucket < 0 ? new QTableWidgetItem("loss") : new NumberItem(double(c.bucket), "");
    if (c.bucket < 0) {
      bucket->setData(Qt::UserRole, -1.0);
      bucket->setToolTip("the allreduce of the loss and metrics, right after the loss (no gradient bucket)");
    }
    table_->setItem(r, 0, bucket);
    table_->setItem(r, 1, new QTableWidgetItem(QString::fromStdString(c.collective)));
    table_->setItem(r, 2, new QTableWidgetItem(QString::fromStdString(c.algorithm)));
    table_->setItem(r, 3, new NumberItem(double(c.tensors), ""));
    table_->setItem(r, 4, new NumberItem(dense, "B"));
    table_->setItem(r, 5, new NumberItem(sent, "B"));
    table_->setItem(r, 6, new NumberItem(dense > 0 ? 100.0 * sent / dense : 0.0, "%"));
    table_->setItem(r, 7, new NumberItem(ms, "ms"));
    table_->setItem(r, 8, new NumberItem(ms > 0 ? std::clamp(100.0 * (1 - waited / ms), 0.0, 100.0) : 100.0, "%"));
    ++r;
  }
  table_->setSortingEnabled(true);
  table_->resizeColumnsToContents();
}

}  // namespace kiln::studio
