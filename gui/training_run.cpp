#include "gui/training_run.h"

#include <QApplication>
#include <QEventLoop>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QProcess>
#include <QProgressDialog>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QtConcurrent/QtConcurrent>
#include <atomic>
#include <chrono>

#include "driver/machine_roofs.h"
#include "driver/option_table.h"
#include "driver/report.h"
#include "driver/trainer.h"

namespace kiln::studio {

QString kilnExecutable() {
  const QString dir = QCoreApplication::applicationDirPath();
  for (const QString& p : {dir + "/kiln", dir + "/../kiln"})
    if (QFileInfo(p).isExecutable()) return QFileInfo(p).canonicalFilePath();
  return QStandardPaths::findExecutable("kiln");
}

namespace {

/// The worker thread's view of the progress dialog: the step reached, and Cancel.
class MeasureObserver : public driver::TrainObserver {
 public:
  explicit MeasureObserver(std::atomic<bool>& cancel, std::atomic<int64_t>& done) : cancel_(cancel), done_(done) {}
  Status onStep(const driver::StepRecord& r, bool, bool, const std::map<std::string, double>&) override {
    done_ = r.step + 1;
    return {};
  }
  bool keepGoing() override { return !cancel_; }

 private:
  std::atomic<bool>& cancel_;
  std::atomic<int64_t>& done_;
};

/// One rank: compile and train in this process, on a worker thread.
Result<std::shared_ptr<StudioDocument>> measureInProcess(QWidget* parent, const QString& model, TrainingRun run,
                                                         driver::CompileOptions options) {
  options.model.path = model.toStdString();
  options.steps = run.steps;
  options.keep_pass_ir = true;
  options.nproc = 1;
  QProgressDialog progress(
      QString("Training %1 for %2 steps in this process...").arg(QFileInfo(model).fileName()).arg(run.steps), "Cancel",
      0, run.steps, parent);
  progress.setWindowModality(Qt::WindowModal);
  progress.setMinimumDuration(300);
  std::atomic<bool> cancel{false};
  std::atomic<int64_t> done{0};
  QFutureWatcher<Result<driver::Report>> watcher;
  QEventLoop loop;
  QObject::connect(&watcher, &QFutureWatcherBase::finished, &loop, &QEventLoop::quit);
  QObject::connect(&progress, &QProgressDialog::canceled, [&] { cancel = true; });
  QTimer tick;
  QObject::connect(&tick, &QTimer::timeout, [&] { progress.setValue(int(done.load())); });
  tick.start(100);
  watcher.setFuture(QtConcurrent::run([options, run, &cancel, &done]() -> Result<driver::Report> {
    const auto t0 = std::chrono::steady_clock::now();
    TraceRecorder trace;  // the report's timeline
    driver::CompileOptions traced = options;
    traced.trace = &trace;
    auto step = driver::compileStep(traced, TrainingGraphKind::Step);
    if (!step) return step.error();
    const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    driver::TrainLoopOptions o;
    o.steps = run.steps;
    o.record_steps = true;
    o.profile_nodes = true;
    o.trace = &trace;
    MeasureObserver observer(cancel, done);
    auto result = driver::runTraining(*step, o, observer);
    if (!result) return result.error();
    if (result->stopped) return driver::compileCancelled();
    auto report = driver::buildReport("train", options, *step, compile_ms);
    driver::addTrainingResult(report, *step, *result, &trace);
    driver::addMachine(report, options.cache_dir);
    return report;
  }));
  if (!watcher.isFinished()) loop.exec();
  tick.stop();
  progress.reset();
  Result<driver::Report> report = watcher.result();
  if (!report) {
    if (report.error().kind == ErrorKind::kCancelled)
      return Error{"training " + options.model.path + " was cancelled"};
    return report.error();
  }
  return StudioDocument::fromReport(std::move(*report), options.model.path);
}

}  // namespace

Result<std::shared_ptr<StudioDocument>> measureTraining(QWidget* parent, const QString& model, TrainingRun run,
                                                        driver::CompileOptions options) {
  if (run.ranks <= 1) return measureInProcess(parent, model, run, std::move(options));
  const QString kiln = kilnExecutable();
  if (kiln.isEmpty())
    return Error{"cannot find the kiln executable to train " + model.toStdString() + " (put it on PATH)"};
  QTemporaryDir tmp;
  if (!tmp.isValid()) return Error{"cannot make a temporary directory for the report"};
  const QString report = tmp.filePath("report.json");
  QProgressDialog progress(
      QString("Training %1 for %2 steps on %3 ranks...").arg(QFileInfo(model).fileName()).arg(run.steps).arg(run.ranks),
      "Cancel", 0, 0, parent);
  progress.setWindowModality(Qt::WindowModal);
  progress.setMinimumDuration(300);
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  QStringList args = {
      "train",    model,  "--nproc",         QString::number(run.ranks), "--steps", QString::number(run.steps),
      "--report", report, "--report-pass-ir"};
  // The run's own settings above win over the ones these options carry.
  const driver::CompileOptions defaults;
  options.nproc = defaults.nproc;
  options.steps = defaults.steps;
  options.keep_pass_ir = defaults.keep_pass_ir;
  for (const std::string& word : driver::toArguments(options, driver::kTrain)) args << QString::fromStdString(word);
  p.start(kiln, args);
  QString last;
  while (!p.waitForFinished(100)) {
    if (p.state() == QProcess::NotRunning) break;
    const QString out = QString::fromUtf8(p.readAll()).trimmed();
    if (!out.isEmpty()) {
      last = out.section('\n', -1);
      progress.setLabelText(last.section('\r', -1));
    }
    QApplication::processEvents();
    if (progress.wasCanceled()) {
      p.kill();
      p.waitForFinished();
      return Error{"training " + model.toStdString() + " was cancelled"};
    }
  }
  const QString rest = QString::fromUtf8(p.readAll()).trimmed();
  if (!rest.isEmpty()) last = rest.section('\n', -1);
  if (p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0)
    return Error{last.isEmpty() ? "kiln train " + model.toStdString() + " failed" : last.toStdString()};
  return StudioDocument::open(report.toStdString());
}

}  // namespace kiln::studio
