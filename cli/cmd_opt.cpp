// kiln opt GRAPH.kir --passes a,b,c [-o OUT.kir]: run passes over a graph
// given as text IR (or JSON) and print the result as text IR -- the tool
// behind the FileCheck golden tests (tests/passes/filecheck/), like
// mlir-opt. It takes kiln train's options that the passes read (the option
// table's kiln opt rows: loss, optimizer, --freeze, --amp, --memory-budget,
// data parallel, and the PassManager switches --print-ir-after,
// --verify-each, --dump-dir).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/file_io.h"
#include "core/graph_json.h"
#include "core/text_ir.h"
#include "core/verifier.h"
#include "driver/messages.h"
#include "driver/model_args.h"
#include "driver/option_table.h"
#include "driver/pass_flags.h"
#include "driver/training_options.h"
#include "passes/freeze.h"

namespace kiln::cli {
namespace {

struct OptArgs {
  std::string input;
  std::string output;
  CompileOptions options;  ///< the options the passes read (the option table's kiln opt rows)
  int rank = 0;            ///< --rank: whose graph a ZeRO-1 run shows
};

int runOpt(const OptArgs& args) {
  const CompileOptions& a = args.options;
  if (Status s = validateOptions(a); !s) return reportError(s.error());
  auto pipeline = checkPassFlags(a.pass_flags);
  if (!pipeline) return reportError(pipeline.error());
  auto text = readFile(args.input);
  if (!text) return reportError(text.error());
  bool json = args.input.size() >= 5 && args.input.compare(args.input.size() - 5, 5, ".json") == 0;
  auto g = json ? graphFromJsonText(*text, args.input) : parseGraph(*text, args.input);
  if (!g) return reportError(g.error());
  if (Status s = verify(*g); !s) return reportError(Error{args.input + ": " + s.error().message});
  PassContext ctx;
  auto training = trainingOptions(a, std::max(a.nproc, 1), args.rank);
  if (!training) return reportError(training.error());
  ctx.training = std::move(*training);
  if (!a.freeze.empty()) {
    std::vector<std::string> params;
    for (const Value* v : g->inputs())
      if (v->role() == ValueRole::Param) params.push_back(v->name());
    auto frozen = resolveFreezePatterns(a.freeze, params);
    if (!frozen) return reportError(Error{args.input + ": " + frozen.error().message});
    ctx.training.frozen = std::move(*frozen);
  }
  PassManagerOptions o = passManagerOptions(a.pass_flags, &std::cerr);
  if (Status s = runPipeline(*g, ctx, *pipeline, o); !s)
    return reportError(Error{args.input + ": " + s.error().message});
  std::string result = printGraph(*g);
  if (args.output.empty() || args.output == "-") {
    std::cout << result;
    return 0;
  }
  if (Status s = writeFileAtomic(args.output, result); !s) return reportError(s.error());
  return 0;
}

}  // namespace

void addOptCommand(CLI::App& app) {
  auto a = std::make_shared<OptArgs>();
  CLI::App* sub =
      app.add_subcommand("opt", "run passes over a text-IR graph and print the result (kiln passes lists them)");
  sub->add_option("graph", a->input, "a .kir text-IR file or a .json graph")->required();
  sub->add_option("-o,--output", a->output, "write the result here (atomically) instead of printing it");
  addOptions(sub, a->options, kOpt);
  sub->get_option("--passes")->required()->description("the passes to run, a,b,c");
  sub->get_option("--zero")->check(CLI::Range(0, 1));
  sub->add_option("--rank", a->rank, "with --zero 1: the rank whose graph to build (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub->callback([a] {
    int rc = runOpt(*a);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
