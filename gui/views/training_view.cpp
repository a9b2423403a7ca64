#include "gui/views/training_view.h"

#include <QHeaderView>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <optional>

#include "gui/views/table_view.h"

namespace kiln::studio {
namespace {

const QColor kLoss(0x4e, 0x79, 0xa7), kMetric(0xf2, 0x8e, 0x2b), kPoint(0x59, 0xa1, 0x4f), kTarget(0xe1, 0x57, 0x59);

/// The metric the chart and table show: the target's, else accuracy where
/// evaluated, else the loss.
std::string shownMetric(const driver::ReportRecipe& r) {
  if (r.target) return r.target->metric;
  if (!r.evaluations.empty() && r.evaluations.front().accuracy) return "accuracy";
  return "loss";
}

std::optional<double> metricOf(const driver::ReportEvaluation& e, const std::string& metric) {
  if (metric == "accuracy") return e.accuracy;
  if (metric == "perplexity") return e.perplexity;
  return e.loss;
}

QString cacheWords(const std::string& cache) {
  if (cache == "hit") return "from the compile cache";
  if (cache == "off") return "compiled (cache off)";
  return "compiled (cache " + QString::fromStdString(cache) + ")";
}

}  // namespace

TrainingChart::TrainingChart(QWidget* parent) : QWidget(parent) {
  setMinimumSize(480, 240);
  setUpChart(this);
}

void TrainingChart::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  last_step_ = 1;
  if (doc_) {
    const driver::Report& r = doc_->report();
    if (r.steps && !r.steps->empty()) last_step_ = std::max(last_step_, double(r.steps->back().step + 1));
    if (r.recipe)
      for (const auto& e : r.recipe->evaluations) last_step_ = std::max(last_step_, double(e.step));
  }
  update();
}

QRectF TrainingChart::plotArea() const {
  return QRectF(60, 40, std::max(10.0, width() - 130.0), std::max(10.0, height() - 75.0));
}

double TrainingChart::xOf(double step) const {
  const QRectF a = plotArea();
  return a.left() + a.width() * step / last_step_;
}

void TrainingChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  const bool has_steps = doc_ && doc_->report().steps && !doc_->report().steps->empty();
  const bool has_recipe = doc_ && doc_->report().recipe;
  if (!has_steps && !has_recipe) {
    p.drawText(rect(), Qt::AlignCenter,
               "No training steps in this report: kiln train --report R.json writes them;\n"
               "--eval-data adds evaluations, --freeze-schedule / --seq-warmup / --resize-schedule schedule points "
               "(docs/recipes.md).");
    return;
  }
  p.setRenderHint(QPainter::Antialiasing);
  const QRectF a = plotArea();
  p.setPen(Qt::gray);
  p.drawRect(a);
  const driver::Report& r = doc_->report();
  // The training loss, on the left axis.
  if (has_steps) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& s : *r.steps)
      if (std::isfinite(s.loss)) lo = std::min(lo, s.loss), hi = std::max(hi, s.loss);
    if (hi <= lo) hi = lo + 1;
    auto y = [&](double v) { return a.bottom() - a.height() * (v - lo) / (hi - lo); };
    QPainterPath path;
    bool started = false;
    for (const auto& s : *r.steps) {
      if (!std::isfinite(s.loss)) continue;
      const QPointF pt(xOf(double(s.step) + 0.5), y(s.loss));
      started ? path.lineTo(pt) : path.moveTo(pt);
      started = true;
    }
    p.setPen(QPen(kLoss, 1.5));
    p.drawPath(path);
    p.drawText(QRectF(0, a.top() - 4, a.left() - 6, 16), Qt::AlignRight, QString::number(hi, 'g', 4));
    p.drawText(QRectF(0, a.bottom() - 12, a.left() - 6, 16), Qt::AlignRight, QString::number(lo, 'g', 4));
    p.drawText(QRectF(a.left(), 2, 200, 16), Qt::AlignLeft, "training loss");
  }
  // The evaluations' metric and the target, on the right axis.
  if (has_recipe && !r.recipe->evaluations.empty()) {
    const std::string metric = shownMetric(*r.recipe);
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& e : r.recipe->evaluations)
      if (auto v = metricOf(e, metric)) lo = std::min(lo, *v), hi = std::max(hi, *v);
    if (r.recipe->target) lo = std::min(lo, r.recipe->target->value), hi = std::max(hi, r.recipe->target->value);
    if (hi <= lo) hi = lo + 1;
    const double pad = 0.05 * (hi - lo);
    lo -= pad, hi += pad;
    auto y = [&](double v) { return a.bottom() - a.height() * (v - lo) / (hi - lo); };
    if (r.recipe->target) {
      p.setPen(QPen(kTarget, 1, Qt::DotLine));
      const double ty = y(r.recipe->target->value);
      p.drawLine(QPointF(a.left(), ty), QPointF(a.right(), ty));
      p.drawText(QRectF(a.right() + 4, ty - 8, 66, 16), Qt::AlignLeft,
                 "target " + QString::number(r.recipe->target->value, 'g', 4));
    }
    QPainterPath path;
    bool started = false;
    p.setPen(QPen(kMetric, 2));
    p.setBrush(kMetric);
    for (const auto& e : r.recipe->evaluations) {
      const auto v = metricOf(e, metric);
      if (!v) continue;
      const QPointF pt(xOf(double(e.step)), y(*v));
      started ? path.lineTo(pt) : path.moveTo(pt);
      started = true;
      p.drawEllipse(pt, 3, 3);
    }
    p.setBrush(Qt::NoBrush);
    p.drawPath(path);
    p.drawText(QRectF(a.right() - 300, 2, 300, 16), Qt::AlignRight,
               "held-out " + QString::fromStdString(metric) + " (right axis)");
    p.drawText(QRectF(a.right() + 4, a.top() - 4, 66, 16), Qt::AlignLeft, QString::number(hi, 'g', 4));
    p.drawText(QRectF(a.right() + 4, a.bottom() - 12, 66, 16), Qt::AlignLeft, QString::number(lo, 'g', 4));
  }
  // The schedule points: where the compiled step changed.
  if (has_recipe) {
    p.setPen(QPen(kPoint, 1.5, Qt::DashLine));
    int i = 0;
    for (const auto& s : r.recipe->schedule) {
      const double x = xOf(double(s.step));
      p.drawLine(QPointF(x, a.top()), QPointF(x, a.bottom()));
      p.save();
      p.setPen(kPoint);
      p.drawText(QRectF(x + 3, a.top() + 2 + 14.0 * (i++ % 4), 400, 14), Qt::AlignLeft,
                 QString::fromStdString(s.change) + QString(" (%1 ms)").arg(s.compile_ms, 0, 'f', 0));
      p.restore();
    }
  }
  p.setPen(Qt::black);
  p.drawText(QRectF(a.left(), a.bottom() + 4, a.width(), 16), Qt::AlignLeft, "0");
  p.drawText(QRectF(a.left(), a.bottom() + 4, a.width(), 16), Qt::AlignRight, QString::number(last_step_, 'f', 0));
  p.drawText(QRectF(a.left(), a.bottom() + 4, a.width(), 16), Qt::AlignHCenter, "step");
}

QString TrainingChart::describeAt(QPointF pos) const {
  if (!doc_ || !plotArea().adjusted(-4, -4, 4, 4).contains(pos)) return {};
  const driver::Report& r = doc_->report();
  if (r.recipe) {
    for (const auto& s : r.recipe->schedule)
      if (std::abs(xOf(double(s.step)) - pos.x()) <= 4)
        return QString("step %1: %2\n%3-node step, %4 trainable parameters\n%5 in %6 ms")
            .arg(s.step)
            .arg(QString::fromStdString(s.change))
            .arg(s.nodes)
            .arg(s.trainable_params)
            .arg(cacheWords(s.cache))
            .arg(s.compile_ms, 0, 'f', 1);
    const std::string metric = shownMetric(*r.recipe);
    for (const auto& e : r.recipe->evaluations)
      if (std::abs(xOf(double(e.step)) - pos.x()) <= 4) {
        QString text = QString("evaluation after step %1: loss %2").arg(e.step).arg(e.loss, 0, 'g', 5);
        if (e.accuracy) text += QString(", accuracy %1").arg(*e.accuracy, 0, 'g', 4);
        if (e.perplexity) text += QString(", perplexity %1").arg(*e.perplexity, 0, 'g', 5);
        return text + QString("\n%1 s of training, evaluated in %2 ms")
                          .arg(e.train_seconds, 0, 'f', 2)
                          .arg(e.eval_ms, 0, 'f', 1);
      }
  }
  if (r.steps && !r.steps->empty()) {
    const double step = (pos.x() - plotArea().left()) / plotArea().width() * last_step_;
    const auto& all = *r.steps;
    auto it = std::min_element(all.begin(), all.end(), [&](const auto& x, const auto& y) {
      return std::abs(double(x.step) - step) < std::abs(double(y.step) - step);
    });
    return QString("step %1: loss %2, %3 ms, lr %4")
        .arg(it->step)
        .arg(it->loss, 0, 'g', 5)
        .arg(it->millis, 0, 'f', 2)
        .arg(it->lr, 0, 'g', 3);
  }
  return {};
}

void TrainingChart::mouseMoveEvent(QMouseEvent* e) {
  const QString text = describeAt(e->position());
  if (text.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(e->globalPosition().toPoint(), text, this);
}

TrainingView::TrainingView(QWidget* parent) : View(parent) {
  auto* layout = new QVBoxLayout(this);
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  chart_ = new TrainingChart(this);
  table_ = new QTableWidget(this);
  setUpTable(table_);
  layout->addWidget(summary_);
  layout->addWidget(chart_, 2);
  layout->addWidget(table_, 1);
}

void TrainingView::setDocument(std::shared_ptr<const StudioDocument> doc) {
  chart_->setDocument(doc);
  table_->setSortingEnabled(false);
  table_->clear();
  const QStringList columns = {"step", "event", "what", "time", "cache", "value"};
  table_->setColumnCount(static_cast<int>(columns.size()));
  table_->setHorizontalHeaderLabels(columns);
  setHeaderTips(table_, {{"step", "schedule points: the first step the new compiled step trained; evaluations: "
                                  "the steps trained before it"},
                         {"time", "schedule points: compiling (or reading from the cache) and binding the new step; "
                                  "evaluations: the evaluation's own time"},
                         {"cache", "the compile cache's answer for the new step: hit, miss, rebuilt or off"},
                         {"value", "evaluations: the held-out metric; schedule points: trainable parameters"}});
  const driver::ReportRecipe* recipe = doc && doc->report().recipe ? &*doc->report().recipe : nullptr;
  const size_t rows = recipe ? recipe->schedule.size() + recipe->evaluations.size() : 0;
  table_->setRowCount(static_cast<int>(rows));
  int row = 0;
  if (recipe) {
    const std::string metric = shownMetric(*recipe);
    for (const auto& s : recipe->schedule) {
      table_->setItem(row, 0, new NumberItem(double(s.step), ""));
      table_->setItem(row, 1, new QTableWidgetItem("schedule point"));
      table_->setItem(row, 2, new QTableWidgetItem(QString::fromStdString(s.change)));
      table_->setItem(row, 3, new NumberItem(s.compile_ms, "ms"));
      table_->setItem(row, 4, new QTableWidgetItem(QString::fromStdString(s.cache)));
      table_->setItem(row, 5, new NumberItem(double(s.trainable_params), ""));
      ++row;
    }
    for (const auto& e : recipe->evaluations) {
      table_->setItem(row, 0, new NumberItem(double(e.step), ""));
      table_->setItem(row, 1, new QTableWidgetItem("evaluation"));
      table_->setItem(row, 2, new QTableWidgetItem(QString::fromStdString(metric)));
      table_->setItem(row, 3, new NumberItem(e.eval_ms, "ms"));
      table_->setItem(row, 4, new QTableWidgetItem(""));
      table_->setItem(row, 5, new NumberItem(metricOf(e, metric).value_or(NAN), ""));
      ++row;
    }
  }
  table_->setSortingEnabled(true);
  table_->sortByColumn(0, Qt::AscendingOrder);
  table_->resizeColumnsToContents();
  QString text;
  if (!recipe) {
    text = doc && doc->report().steps
               ? QString("%1 steps trained; no recipe (docs/recipes.md)").arg(doc->report().steps->size())
               : QString("No training in this report.");
  } else {
    double compile_ms = 0;
    for (const auto& s : recipe->schedule) compile_ms += s.compile_ms;
    text = QString("%1 schedule points (recompiles: %2 ms in all), %3 evaluations")
               .arg(recipe->schedule.size())
               .arg(compile_ms, 0, 'f', 1)
               .arg(recipe->evaluations.size());
    if (const auto& t = recipe->target) {
      const QString goal = QString::fromStdString(t->metric) + (t->metric == "accuracy" ? " >= " : " <= ") +
                           QString::number(t->value, 'g', 6);
      text += t->reached ? QString("; reached %1 after %2 steps and %3 s of training")
                               .arg(goal)
                               .arg(t->step.value_or(0))
                               .arg(t->train_seconds.value_or(0), 0, 'f', 2)
                         : QString("; did not reach %1").arg(goal);
    }
  }
  summary_->setText(text);
}

}  // namespace kiln::studio
