// kiln-studio's window: the views as tabs over one document (and the
// compare view over two), File (open a report, or a model compiled
// in-process; compare it with another; recent files; export the current
// view as SVG or PNG, its table as CSV, the graph as DOT), View (find, fit, zoom) and a
// remembered window state (QSettings).
#pragma once

#include <QMainWindow>
#include <QTabWidget>
#include <memory>
#include <vector>

#include "driver/compile_options.h"
#include "gui/studio_document.h"
#include "gui/views/view.h"

namespace kiln::studio {

class CompareView;
class GraphView;

class MainWindow : public QMainWindow {
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// The options models are compiled and measured with (kiln compile's,
  /// from kiln-studio's command line).
  void setCompileOptions(driver::CompileOptions options) { options_ = std::move(options); }
  /// Open a report (.json); a model (.pt, .fx.json) is compiled first, in
  /// this process on a worker thread, as kiln compile --report
  /// --report-pass-ir would with the compile options (a progress dialog
  /// with Cancel). With `ask`, an archive that records no input shapes
  /// makes it ask for them or for a batch file, and try again. Returns
  /// false with `error` set when it cannot.
  bool openPath(const QString& path, QString* error = nullptr, bool ask = false);
  /// Compare the open document (A, the baseline) with the report or model
  /// at `path` (B) in the compare view, and show it. False with `error`
  /// set when nothing is open or B cannot be opened.
  bool compareWith(const QString& path, QString* error = nullptr);
  /// Train the open document's model a few steps on `ranks` ranks (kiln
  /// train --nproc R --report; one rank trains in this process), with the
  /// options its report was compiled with, or the compile options, and show
  /// that report: measured kernel times (and with several ranks the
  /// communication) fill in. False with `error` set when it cannot.
  bool measure(QString* error = nullptr, int ranks = 2);
  void setDocument(std::shared_ptr<const StudioDocument> doc);
  std::shared_ptr<const StudioDocument> document() const { return doc_; }

  /// Show the view named `name` (graph, passes, memory, kernels, comm, timeline, roofline, compare).
  bool showView(const QString& name);
  View* currentView() const;
  View* view(const QString& name) const;
  GraphView* graphView() const { return graph_; }
  /// Render the current view to `path` (.png or .svg): the whole content
  /// (a graph's whole scene). False on failure.
  bool exportCurrentView(const QString& path, QString* error = nullptr);
  /// Write the current view's table as CSV (gui/export_view.h). False with
  /// `error` set when it has none or the file cannot be written.
  bool exportCurrentTable(const QString& path, QString* error = nullptr);
  /// Save the current view as shown in the window (PNG): --screenshot.
  bool screenshotCurrentView(const QString& path, QString* error = nullptr);
  /// Block until the graph layouts running on worker threads are drawn.
  void waitForLayouts();

 private:
  Result<std::shared_ptr<StudioDocument>> compileModel(const QString& path);
  /// A report, or a model compiled (asking for its inputs with `ask`).
  Result<std::shared_ptr<StudioDocument>> load(const QString& path, bool ask);
  /// Ask for the input shapes or a batch file of `path`, which records
  /// none; false when the user cancels.
  bool askForInputs(const QString& path);
  void buildMenus();
  void rememberRecent(const QString& path);
  void rebuildRecentMenu();

  QTabWidget* tabs_;
  std::vector<View*> views_;
  GraphView* graph_ = nullptr;
  CompareView* compare_ = nullptr;
  QMenu* recent_ = nullptr;
  std::shared_ptr<const StudioDocument> doc_;
  driver::CompileOptions options_;
};

}  // namespace kiln::studio
