#include "gui/training_run.h"

#include <QApplication>
#include <QFileInfo>
#include <QProcess>
#include <QProgressDialog>
#include <QStandardPaths>
#include <QTemporaryDir>

#include "driver/option_table.h"

namespace kiln::studio {

QString kilnExecutable() {
  const QString dir = QCoreApplication::applicationDirPath();
  for (const QString& p : {dir + "/kiln", dir + "/../kiln"})
    if (QFileInfo(p).isExecutable()) return QFileInfo(p).canonicalFilePath();
  return QStandardPaths::findExecutable("kiln");
}

Result<std::shared_ptr<StudioDocument>> measureTraining(QWidget* parent, const QString& model, TrainingRun run,
                                                        driver::CompileOptions options) {
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
  QStringList args = {"train", model, "--nproc", QString::number(run.ranks), "--steps", QString::number(run.steps),
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
