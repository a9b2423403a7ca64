#include "gui/main_window.h"

#include <QApplication>
#include <QDir>
#include <QEventLoop>
#include <QFileDialog>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QInputDialog>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPointer>
#include <QProgressDialog>
#include <QPushButton>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSettings>
#include <QStatusBar>
#include <QtConcurrent/QtConcurrent>
#include <atomic>

#include "core/file_io.h"
#include "core/graph_dot.h"
#include "driver/compile.h"
#include "driver/option_table.h"
#include "gui/export_view.h"
#include "gui/model_compiler.h"
#include "gui/training_run.h"
#include "gui/views/chart_views.h"
#include "gui/views/compare_view.h"
#include "gui/views/graph_view.h"
#include "gui/views/passes_view.h"
#include "gui/views/roofline_view.h"
#include "gui/views/table_view.h"
#include "gui/views/timeline_view.h"
#include "gui/views/training_view.h"

namespace kiln::studio {
namespace {

constexpr int kRecentFiles = 8;

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("kiln-studio");
  tabs_ = new QTabWidget(this);
  graph_ = new GraphView(tabs_);
  compare_ = new CompareView(tabs_);
  auto* memory = new MemoryView(tabs_);
  auto* kernels = new KernelsView(tabs_);
  auto* timeline = new TimelineView(tabs_);
  auto* roofline = new RooflineView(tabs_);
  views_ = {graph_,   new PassesView(tabs_), memory, kernels, new CommView(tabs_), timeline, roofline,
            new TrainingView(tabs_), compare_};
  for (View* v : views_) tabs_->addTab(v, v->name());
  // A click on the memory timeline selects that node in the graph.
  memory->chart()->on_node_clicked = [this](int node) {
    showView("graph");
    graph_->select(node);
  };
  // A click on a kernel's slice selects its node in the graph and the kernels table.
  auto selectEverywhere = [this, kernels](int node) {
    graph_->select(node);
    kernels->selectNode(node);
    statusBar()->showMessage(QString("node %1 selected in the graph and kernels views").arg(node));
  };
  timeline->chart()->on_node_clicked = selectEverywhere;
  roofline->chart()->on_node_clicked = selectEverywhere;
  connect(roofline->table(), &QTableWidget::cellActivated, this, [roofline, selectEverywhere](int row, int) {
    if (QTableWidgetItem* item = roofline->table()->item(row, 0))
      selectEverywhere(item->data(Qt::UserRole + 1).toInt());
  });
  setCentralWidget(tabs_);
  buildMenus();
  QSettings s;
  restoreGeometry(s.value("window/geometry").toByteArray());
  restoreState(s.value("window/state").toByteArray());
  if (s.contains("window/view")) showView(s.value("window/view").toString());
  statusBar()->showMessage(
      "Open a report (kiln compile --report R.json) or a model: File > Open (Ctrl+O); Run > Measure (Ctrl+R) "
      "trains it a few steps for kernel times and communication");
}

MainWindow::~MainWindow() {
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  s.setValue("window/state", saveState());
  if (currentView()) s.setValue("window/view", currentView()->name());
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open...", QKeySequence::Open, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, "Open a report or a model", QString(),
                                                      "Reports and models (*.json *.pt *.fx.json);;All files (*)");
    QString error;
    if (!path.isEmpty() && !openPath(path, &error, true)) QMessageBox::warning(this, "kiln-studio", error);
  });
  file->addAction("&Compare with...", QKeySequence("Ctrl+D"), this, [this] {
    if (!doc_) {
      QMessageBox::information(this, "kiln-studio", "Open a report first: it is the baseline (A) of the comparison.");
      return;
    }
    const QString path = QFileDialog::getOpenFileName(this, "Compare the open report with", QString(),
                                                      "Reports and models (*.json *.pt *.fx.json);;All files (*)");
    QString error;
    if (!path.isEmpty() && !compareWith(path, &error)) QMessageBox::warning(this, "kiln-studio", error);
  });
  recent_ = file->addMenu("Open &recent");
  rebuildRecentMenu();
  file->addAction("&Export view...", QKeySequence("Ctrl+E"), this, [this] {
    if (!currentView()) return;
    const QString path = QFileDialog::getSaveFileName(this, "Export the view", currentView()->name() + ".svg",
                                                      "SVG (*.svg);;PNG (*.png)");
    QString error;
    if (!path.isEmpty() && !exportCurrentView(path, &error)) QMessageBox::warning(this, "kiln-studio", error);
  });
  file->addAction("Export &table as CSV...", QKeySequence("Ctrl+Shift+E"), this, [this] {
    if (!currentView()) return;
    if (!currentView()->csvTable()) {
      QMessageBox::information(this, "kiln-studio", "The " + currentView()->name() + " view has no table.");
      return;
    }
    const QString path =
        QFileDialog::getSaveFileName(this, "Export the table", currentView()->name() + ".csv", "CSV (*.csv)");
    QString error;
    if (!path.isEmpty() && !exportCurrentTable(path, &error)) QMessageBox::warning(this, "kiln-studio", error);
  });
  file->addAction("Export graph as &DOT...", this, [this] {
    if (!doc_ || !doc_->graph()) return;
    const QString path = QFileDialog::getSaveFileName(this, "Export the graph", "step.dot", "DOT (*.dot)");
    if (path.isEmpty()) return;
    if (Status st = writeFileAtomic(path.toStdString(), graphToDot(*doc_->graph())); !st)
      QMessageBox::warning(this, "kiln-studio", QString::fromStdString(st.error().message));
  });
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);
  QMenu* run = menuBar()->addMenu("&Run");
  run->addAction("&Measure: train 5 steps on 2 ranks", QKeySequence("Ctrl+R"), this, [this] {
    QString error;
    if (!measure(&error)) QMessageBox::warning(this, "kiln-studio", error);
  });
  run->addAction("Measure &in this process: train 5 steps, 1 rank", QKeySequence("Ctrl+Shift+R"), this, [this] {
    QString error;
    if (!measure(&error, 1)) QMessageBox::warning(this, "kiln-studio", error);
  });
  QMenu* view = menuBar()->addMenu("&View");
  view->addAction("&Find in graph", QKeySequence::Find, this, [this] {
    showView("graph");
    graph_->focusFind();
  });
  view->addAction("&Fit graph", QKeySequence("Ctrl+0"), this, [this] { graph_->fit(); });
  view->addAction("Zoom &in", QKeySequence::ZoomIn, this, [this] {
    if (auto* gv = qobject_cast<QGraphicsView*>(graph_->renderTarget())) gv->scale(1.25, 1.25);
  });
  view->addAction("Zoom &out", QKeySequence::ZoomOut, this, [this] {
    if (auto* gv = qobject_cast<QGraphicsView*>(graph_->renderTarget())) gv->scale(0.8, 0.8);
  });
  for (int i = 0; i < int(views_.size()); ++i)
    view->addAction(views_[size_t(i)]->name(), QKeySequence(QString("Ctrl+%1").arg(i + 1)), this,
                    [this, i] { tabs_->setCurrentIndex(i); });
}

bool MainWindow::compareWith(const QString& path, QString* error) {
  if (!doc_) {
    if (error) *error = "open a report first: it is the baseline of the comparison";
    return false;
  }
  auto other = load(path, false);
  if (!other) {
    if (error) *error = QString::fromStdString(other.error().message);
    return false;
  }
  compare_->setComparison(doc_, *other);
  showView("compare");
  statusBar()->showMessage("A: " + QString::fromStdString(doc_->path()) + "    B: " + path);
  return true;
}

Result<std::shared_ptr<StudioDocument>> MainWindow::load(const QString& path, bool ask) {
  Result<std::shared_ptr<StudioDocument>> doc = Error{""};
  if (!path.endsWith(".json") || path.endsWith(".fx.json")) {
    doc = compileModel(path);
    // A plain torch.jit.trace(...).save() archive: its input shapes, then again.
    while (!doc && ask && doc.error().kind == ErrorKind::kInputShapesMissing && askForInputs(path))
      doc = compileModel(path);
  } else {
    doc = StudioDocument::open(path.toStdString());
  }
  return doc;
}

bool MainWindow::openPath(const QString& path, QString* error, bool ask) {
  Result<std::shared_ptr<StudioDocument>> doc = load(path, ask);
  if (!doc) {
    if (error) *error = QString::fromStdString(doc.error().message);
    return false;
  }
  setDocument(*doc);
  rememberRecent(path);
  setWindowTitle("kiln-studio - " + QFileInfo(path).fileName());
  statusBar()->showMessage(path);
  return true;
}

bool MainWindow::askForInputs(const QString& path) {
  QMessageBox box(QMessageBox::Question, "kiln-studio",
                  QFileInfo(path).fileName() +
                      " does not record the shapes of its inputs. Give them, or a batch file (safetensors with "
                      "input0, input1, ...) to take them from.",
                  QMessageBox::Cancel, this);
  QPushButton* shapes = box.addButton("Input &shapes...", QMessageBox::AcceptRole);
  QPushButton* batch = box.addButton("&Batch file...", QMessageBox::AcceptRole);
  box.exec();
  if (box.clickedButton() == shapes) {
    bool ok = false;
    const QString text = QInputDialog::getText(
        this, "kiln-studio",
        "Input shapes, one per input, separated by spaces (e.g. 8x3x224x224 or i64[4,256]):", QLineEdit::Normal,
        QString::fromStdString(options_.model.input_shapes.empty() ? "" : options_.model.input_shapes[0]), &ok);
    if (!ok || text.trimmed().isEmpty()) return false;
    options_.model.input_shapes.clear();
    for (const QString& s : text.split(QRegularExpression("[\\s;]+"), Qt::SkipEmptyParts))
      options_.model.input_shapes.push_back(s.toStdString());
    options_.model.input_file.clear();
    return true;
  }
  if (box.clickedButton() == batch) {
    const QString file = QFileDialog::getOpenFileName(this, "A batch of " + QFileInfo(path).fileName(), QString(),
                                                      "Batches (*.safetensors);;All files (*)");
    if (file.isEmpty()) return false;
    options_.model.input_file = file.toStdString();
    options_.model.input_shapes.clear();
    return true;
  }
  return false;
}

Result<std::shared_ptr<StudioDocument>> MainWindow::compileModel(const QString& path) {
  // The same step kiln compile builds, on a worker thread, every pass's IR
  // kept; the dialog follows the passes and Cancel stops at the next one.
  QProgressDialog progress("Compiling " + QFileInfo(path).fileName() + "...", "Cancel", 0, 100, this);
  progress.setWindowModality(Qt::WindowModal);
  progress.setMinimumDuration(300);
  std::atomic<bool> cancel{false};
  QObject::connect(&progress, &QProgressDialog::canceled, [&] { cancel = true; });
  const std::string model = path.toStdString();
  driver::CompileOptions options = options_;
  options.model.path = model;
  QFutureWatcher<Result<driver::Report>> watcher;
  QEventLoop loop;
  QObject::connect(&watcher, &QFutureWatcherBase::finished, &loop, &QEventLoop::quit);
  QPointer<QProgressDialog> dialog(&progress);
  watcher.setFuture(QtConcurrent::run([options, &cancel, dialog]() -> Result<driver::Report> {
    return compileModelReport(options, [&cancel, dialog](int percent, const std::string& stage) {
      QMetaObject::invokeMethod(
          qApp,
          [dialog, percent, text = QString::fromStdString(stage)] {
            if (!dialog) return;
            dialog->setValue(percent);
            dialog->setLabelText(text);
          },
          Qt::QueuedConnection);
      return !cancel.load();
    }, &cancel);
  }));
  if (!watcher.isFinished()) loop.exec();
  progress.reset();
  Result<driver::Report> report = watcher.result();
  if (!report) {
    if (report.error().kind == ErrorKind::kCancelled) return Error{"compiling " + model + " was cancelled"};
    return report.error();
  }
  return StudioDocument::fromReport(std::move(*report), model);
}

bool MainWindow::measure(QString* error, int ranks) {
  const QString model = doc_ ? QString::fromStdString(doc_->modelPath()) : QString();
  if (model.isEmpty()) {
    if (error) *error = "open a model or a report first: measuring trains the model it names";
    return false;
  }
  // The options the open report was compiled with (its `options`), else kiln-studio's own.
  driver::CompileOptions options = options_;
  if (const auto& given = doc_->report().options; !given.empty()) {
    options = {};
    if (Status st = driver::optionsFromJson(nlohmann::json(given), options); !st) {
      if (error) *error = QString::fromStdString(doc_->path() + ": " + st.error().message);
      return false;
    }
  }
  const TrainingRun run{ranks, 5};
  auto doc = measureTraining(this, model, run, options);
  if (!doc) {
    if (error) *error = QString::fromStdString(doc.error().message);
    return false;
  }
  setDocument(*doc);
  statusBar()->showMessage(
      run.ranks > 1
          ? QString("trained %1 for %2 steps on %3 ranks: kernel times and communication measured")
                .arg(model)
                .arg(run.steps)
                .arg(run.ranks)
          : QString("trained %1 for %2 steps in this process: kernel times measured").arg(model).arg(run.steps));
  return true;
}

void MainWindow::setDocument(std::shared_ptr<const StudioDocument> doc) {
  doc_ = std::move(doc);
  for (View* v : views_) v->setDocument(doc_);
}

bool MainWindow::showView(const QString& name) {
  for (int i = 0; i < int(views_.size()); ++i)
    if (views_[size_t(i)]->name() == name) {
      tabs_->setCurrentIndex(i);
      return true;
    }
  return false;
}

View* MainWindow::currentView() const {
  return dynamic_cast<View*>(tabs_->currentWidget());
}

View* MainWindow::view(const QString& name) const {
  for (View* v : views_)
    if (v->name() == name) return v;
  return nullptr;
}

bool MainWindow::exportCurrentView(const QString& path, QString* error) {
  View* v = currentView();
  if (!v) return false;
  waitForLayouts();
  return exportView(*v, path, error);
}

bool MainWindow::exportCurrentTable(const QString& path, QString* error) {
  View* v = currentView();
  QTableWidget* t = v ? v->csvTable() : nullptr;
  if (!t) {
    if (error) *error = "the " + (v ? v->name() : QString("current")) + " view has no table to export";
    return false;
  }
  return exportTableCsv(*t, path, error);
}

bool MainWindow::screenshotCurrentView(const QString& path, QString* error) {
  View* v = currentView();
  if (!v) return false;
  waitForLayouts();
  if (v == graph_) graph_->canvas()->showOverview();  // the window changed size since the layout
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly) || !v->grab().save(&file, "PNG") || !file.commit()) {
    if (error) *error = path + ": cannot write the PNG (" + file.errorString() + ")";
    return false;
  }
  return true;
}

void MainWindow::waitForLayouts() {
  graph_->waitForLayout();
  if (auto* passes = dynamic_cast<PassesView*>(view("passes"))) passes->waitForLayout();
  QApplication::processEvents();
}

void MainWindow::rememberRecent(const QString& path) {
  QSettings s;
  QStringList recent = s.value("recent").toStringList();
  recent.removeAll(QFileInfo(path).absoluteFilePath());
  recent.prepend(QFileInfo(path).absoluteFilePath());
  while (recent.size() > kRecentFiles) recent.removeLast();
  s.setValue("recent", recent);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recent_->clear();
  const QStringList recent = QSettings().value("recent").toStringList();
  for (const QString& p : recent)
    recent_->addAction(p, this, [this, p] {
      QString error;
      if (!openPath(p, &error, true)) QMessageBox::warning(this, "kiln-studio", error);
    });
  recent_->setEnabled(!recent.isEmpty());
}

}  // namespace kiln::studio
