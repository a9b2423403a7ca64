// kiln memory MODEL [training options] [--top N] [--width W] [--json F]
// Builds the training step exactly as `kiln compile` does and prints its
// memory: the peak and the node where it happens, what the weights,
// optimizer state and batch take, what the step returns, the arena the CPU
// executor runs its intermediates from (passes/memory_plan.h), the largest tensors
// alive at the peak, and the timeline as a sparkline. --json writes the
// report's `memory` object (docs/report-schema.md).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/file_io.h"
#include "driver/compile.h"
#include "driver/memory_report.h"
#include "driver/messages.h"
#include "driver/option_table.h"
#include "driver/report.h"
#include "driver/report_json.h"

namespace kiln::cli {
namespace {

struct MemoryCmd {
  CompileOptions train;
  size_t top = 10;
  size_t width = 64;
  std::string json;
};

int memory(const MemoryCmd& c) {
  if (!c.json.empty())
    if (Status s = checkReportPath(c.json); !s) return reportError(s.error());
  CompileOptions args = c.train;
  args.compile_only = true;  // the memory plan needs no weights
  auto setup = compileStep(args, TrainingGraphKind::Step);
  if (!setup) return reportError(setup.error(), c.train.verbose);
  const Graph& g = setup->session->graph();
  const MemoryPlan& plan = setup->session->memoryPlan();  // what the CPU executor runs
  if (Status s = checkPlan(plan); !s) return reportError(s.error());
  std::cout << "kiln memory " << c.train.model.path << ": step graph " << g.numNodes() << " nodes\n";
  printMemorySummary(std::cout, plan, c.top, c.width, &setup->session->graph());
  if (!c.json.empty()) {
    if (Status st = writeFileAtomic(c.json, toJson(memoryReport(plan, &setup->session->graph())).dump(2) + "\n"); !st)
      return reportError(st.error());
    std::cout << "wrote " << c.json << "\n";
  }
  return 0;
}

}  // namespace

void addMemoryCommand(CLI::App& app) {
  auto c = std::make_shared<MemoryCmd>();
  CLI::App* sub = app.add_subcommand(
      "memory", "build the training step and print its memory: peak, planned arena, largest tensors, timeline");
  addOptions(sub, c->train, kMemory);
  sub->add_option("--top", c->top, "how many of the largest tensors alive at the peak to list (default 10)");
  sub->add_option("--width", c->width, "sparkline width in characters (default 64)")->check(CLI::Range(1, 1000));
  sub->add_option("--json", c->json, "write the memory timeline (the report's `memory` object) here");
  sub->callback([c] {
    int rc = memory(*c);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
