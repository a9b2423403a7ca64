// kiln compile MODEL [training options] [--passes a,b,c] [--report R.json]
//                    [--dump-dir DIR]
// Builds the training step exactly as `kiln train` does (same options, same
// pipeline) and binds kernels, but trains nothing: prints what every pass
// did (time, nodes, flops, estimated peak memory, statistics), the total
// compile time and the peak RSS, and writes the report
// (docs/report-schema.md) with --report.
#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "driver/compile.h"
#include "driver/messages.h"
#include "driver/option_table.h"
#include "driver/report.h"

namespace kiln::cli {
namespace {

struct CompileCmd {
  CompileOptions train;
  std::string report;
};

int compile(const CompileCmd& c) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (!c.report.empty())
    if (Status s = checkReportPath(c.report); !s) return reportError(s.error());  // before minutes of compiling
  CompileOptions args = c.train;
  args.compile_only = true;
  auto setup = compileStep(args, TrainingGraphKind::Step);
  if (!setup) return reportError(setup.error(), c.train.verbose);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const TrainingSession& s = *setup->session;

  std::cout << "kiln compile " << c.train.model.path << ": " << setup->num_params
            << " trainable parameters, step graph " << s.graph().numNodes() << " nodes\n";
  printPassTable(std::cout, s.passTrace());
  double pass_ms = 0;
  if (setup->cache.status != "hit")  // on a hit no pass ran (the table is the one recorded)
    for (const PassTraceEntry& p : s.passTrace()) pass_ms += p.millis;
  std::cout << std::fixed << std::setprecision(1) << "total compile " << ms << " ms (import " << setup->import_ms
            << " ms, passes " << pass_ms << " ms, passes + kernel binding " << setup->compile_ms << " ms), "
            << s.kernelChoices().size() << " kernels bound; peak RSS "
            << humanCount(static_cast<double>(peakRssBytes()), "B") << "\n";
  std::cout << "compile cache: " << setup->cache.status;
  if (setup->cache.status == "hit")
    std::cout << " (entry read and checked in " << setup->cache.load_ms << " ms; the pass table is the one recorded)";
  if (setup->cache.status != "off") std::cout << ", " << setup->cache.entry;
  std::cout << "\n";
  if (c.train.verbose)
    for (const KernelChoice& k : s.kernelChoices()) std::cout << "  " << k.node << " -> " << k.kernel << "\n";
  if (!c.report.empty()) {
    if (Status st = writeReport(c.report, buildReport("compile", args, *setup, ms)); !st)
      return reportError(st.error());
    std::cout << "wrote report to " << c.report << "\n";
  }
  return 0;
}

}  // namespace

void addCompileCommand(CLI::App& app) {
  auto c = std::make_shared<CompileCmd>();
  CLI::App* sub = app.add_subcommand(
      "compile", "build the training step and bind kernels without training; print the pass table, write a report");
  addOptions(sub, c->train, kCompile);
  CLI::Option* report =
      sub->add_option("--report", c->report, "write the compile report (JSON, docs/report-schema.md) here");
  sub->get_option("--report-pass-ir")->needs(report);
  sub->callback([c] {
    int rc = compile(*c);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
