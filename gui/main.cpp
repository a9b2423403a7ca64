// kiln-studio [MODEL|REPORT [SECOND]] [kiln compile's options]
//             [--view graph|passes|memory|kernels|comm|timeline|roofline|compare]
//             [--measure] [--pass NAME] [--colour op|dialect|time|flops|bytes|memory]
//             [--screenshot FILE.png|FILE.svg] [--csv FILE.csv]
// Opens a report (kiln compile/train --report) or a model (compiled in this
// process with kiln compile's options, every pass's IR kept). With --screenshot it renders the view, saves it and
// exits (docs/studio.md's pictures are made so): exit 1 with one line on error.
#include <QApplication>
#include <QTimer>
#include <algorithm>
#include <cstdio>
#include <iterator>

#include <CLI/CLI.hpp>

#include "driver/option_table.h"
#include "gui/main_window.h"
#include "gui/views/graph_view.h"
#include "gui/views/passes_view.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);  // takes Qt's own arguments (-platform, ...) out of argv
  QApplication::setOrganizationName("kiln");
  QApplication::setApplicationName("kiln-studio");
  // kiln compile's options, from the same option table (driver/option_table.h).
  CLI::App cli{"kiln-studio: the graph, passes, memory, kernels, communication, timeline and roofline of a Kiln step"};
  kiln::driver::CompileOptions options;
  kiln::driver::addOptions(&cli, options, kiln::driver::kStudio);
  cli.get_option("model")->description(
      "a report (kiln compile/train --report R.json) or a model (.pt, .fx.json), compiled with the options below");
  std::string view = "graph", pass, screenshot, compare;
  cli.add_option("compare", compare,
                 "a second report or model: compare it with the first (the compare view; File > Compare)");
  bool measure = false;
  int measure_ranks = 2;
  CLI::Option* view_opt =
      cli.add_option("--view", view,
                     "the view to show: graph, passes, memory, kernels, comm, timeline, roofline, compare");
  cli.add_flag("--measure", measure,
               "also train the model 5 steps on 2 ranks (kiln train --nproc 2 --report) so the kernel times and the "
               "communication fill in");
  cli.add_option("--measure-ranks", measure_ranks,
                 "--measure on this many ranks (default 2; 1 trains in this process, without communication)")
      ->check(CLI::Range(1, 64));
  std::string colour;
  CLI::Option* colour_opt =
      cli.add_option("--colour", colour, "the graph's colouring: op, dialect, time, flops, bytes, memory");
  CLI::Option* pass_opt = cli.add_option(
      "--pass", pass, "in the passes view, show this pass before and after (default: the first that changed)");
  CLI::Option* shot_opt = cli.add_option(
      "--screenshot", screenshot,
      "save the view as the window shows it (.png), or its whole content as vector (.svg), and exit");
  std::string csv;
  CLI::Option* csv_opt = cli.add_option("--csv", csv, "write the view's table as CSV (File > Export table) and exit");
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto fail = [](const QString& msg) {
    std::fprintf(stderr, "kiln-studio: error: %s\n", msg.toUtf8().constData());
    return 1;
  };
  const QString path = QString::fromStdString(options.model.path);
  kiln::studio::MainWindow window;  // restores the last view shown
  window.setCompileOptions(options);
  if ((*view_opt || *shot_opt || *csv_opt) && !window.showView(QString::fromStdString(view)))
    return fail("unknown view '" + QString::fromStdString(view) +
                "' (graph, passes, memory, kernels, comm, timeline, roofline, compare)");
  if (!path.isEmpty()) {
    QString error;
    if (!window.openPath(path, &error)) return fail(error);
    if (measure && !window.measure(&error, measure_ranks)) return fail(error);
    if (!compare.empty() && !window.compareWith(QString::fromStdString(compare), &error)) return fail(error);
  }
  if (*colour_opt) {
    static const char* kNames[] = {"op", "dialect", "time", "flops", "bytes", "memory"};
    const auto it = std::find(std::begin(kNames), std::end(kNames), colour);
    if (it == std::end(kNames))
      return fail("unknown colouring '" + QString::fromStdString(colour) +
                  "' (op, dialect, time, flops, bytes, memory)");
    window.graphView()->colourBy(kiln::studio::GraphView::Colouring(it - std::begin(kNames)));
  }
  if (*pass_opt) {
    const QString name = QString::fromStdString(pass);
    auto* passes = dynamic_cast<kiln::studio::PassesView*>(window.view("passes"));
    const int index = passes ? passes->passIndex(name) : -1;
    if (index < 0) return fail("no pass '" + name + "' in this report");
    if (!passes->showPass(size_t(index)))
      return fail(passes->headline().isEmpty() ? "cannot show pass " + name : passes->headline());
  }
  if (*csv_opt) {
    if (path.isEmpty()) return fail("--csv needs a report or a model to open");
    QString error;
    if (!window.exportCurrentTable(QString::fromStdString(csv), &error)) return fail(error);
    std::printf("wrote the %s view's table to %s\n", view.c_str(), csv.c_str());
    if (!*shot_opt) return 0;
  }
  if (*shot_opt) {
    if (path.isEmpty()) return fail("--screenshot needs a report or a model to open");
    window.resize(1400, 900);
    window.show();
    QApplication::processEvents();
    window.waitForLayouts();
    QString error;
    const QString out = QString::fromStdString(screenshot);
    const bool ok = out.endsWith(".png", Qt::CaseInsensitive) ? window.screenshotCurrentView(out, &error)
                                                              : window.exportCurrentView(out, &error);
    if (!ok) return fail(error);
    std::printf("wrote the %s view to %s\n", view.c_str(), screenshot.c_str());
    return 0;
  }
  window.resize(1400, 900);
  window.show();
  return app.exec();
}
