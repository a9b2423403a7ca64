// kiln-studio [MODEL|REPORT] [--view graph|passes|memory|kernels|comm]
//             [--measure] [--pass NAME] [--screenshot FILE.png|FILE.svg]
// Opens a report (kiln compile/train --report) or a model (compiled in this
// process, every pass's IR kept). With --screenshot it renders the view, saves it and
// exits (docs/studio.md's pictures are made so): exit 1 with one line on error.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>
#include <cstdio>

#include "gui/main_window.h"
#include "gui/views/graph_view.h"
#include "gui/views/passes_view.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("kiln");
  QApplication::setApplicationName("kiln-studio");
  QCommandLineParser cli;
  cli.setApplicationDescription("kiln-studio: the graph, passes, memory, kernels and communication of a Kiln step");
  cli.addHelpOption();
  cli.addPositionalArgument("file", "a report (kiln compile/train --report R.json) or a model (.pt, .fx.json)");
  cli.addOption({"view", "the view to show: graph, passes, memory, kernels, comm", "view", "graph"});
  cli.addOption({"measure",
                 "also train the model 5 steps on 2 ranks (kiln train --nproc 2 --report) so the kernel times and "
                 "the communication fill in"});
  cli.addOption(
      {"pass", "in the passes view, show this pass before and after (default: the first that changed)", "name"});
  cli.addOption({"screenshot",
                 "save the view as the window shows it (.png), or its whole content as vector (.svg), and exit",
                 "file"});
  cli.process(app);
  auto fail = [](const QString& msg) {
    std::fprintf(stderr, "kiln-studio: error: %s\n", msg.toUtf8().constData());
    return 1;
  };
  kiln::studio::MainWindow window;  // restores the last view shown
  if ((cli.isSet("view") || cli.isSet("screenshot")) && !window.showView(cli.value("view")))
    return fail("unknown view '" + cli.value("view") + "' (graph, passes, memory, kernels, comm)");
  if (!cli.positionalArguments().isEmpty()) {
    QString error;
    if (!window.openPath(cli.positionalArguments().front(), &error)) return fail(error);
    if (cli.isSet("measure") && !window.measure(&error)) return fail(error);
  }
  if (cli.isSet("pass")) {
    auto* passes = dynamic_cast<kiln::studio::PassesView*>(window.view("passes"));
    const int index = passes ? passes->passIndex(cli.value("pass")) : -1;
    if (index < 0) return fail("no pass '" + cli.value("pass") + "' in this report");
    if (!passes->showPass(size_t(index)))
      return fail(passes->headline().isEmpty() ? "cannot show pass " + cli.value("pass") : passes->headline());
  }
  if (cli.isSet("screenshot")) {
    if (cli.positionalArguments().isEmpty()) return fail("--screenshot needs a report or a model to open");
    window.resize(1400, 900);
    window.show();
    QApplication::processEvents();
    window.waitForLayouts();
    QString error;
    const QString out = cli.value("screenshot");
    const bool ok = out.endsWith(".png", Qt::CaseInsensitive) ? window.screenshotCurrentView(out, &error)
                                                              : window.exportCurrentView(out, &error);
    if (!ok) return fail(error);
    std::printf("wrote the %s view to %s\n", cli.value("view").toUtf8().constData(),
                cli.value("screenshot").toUtf8().constData());
    return 0;
  }
  window.resize(1400, 900);
  window.show();
  return app.exec();
}
