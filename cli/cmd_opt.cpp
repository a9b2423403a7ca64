// kiln opt GRAPH.kir --passes a,b,c [-o OUT.kir]: run passes over a graph
// given as text IR (or JSON) and print the result as text IR -- the tool
// behind the FileCheck golden tests (tests/passes/filecheck/), like
// mlir-opt. The PassManager switches (--print-ir-after, --verify-each,
// --dump-dir) work as in kiln train.
#include <iostream>
#include <memory>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/file_io.h"
#include "core/graph_json.h"
#include "core/text_ir.h"
#include "core/verifier.h"
#include "passes/pass_manager.h"

namespace kiln::cli {
namespace {

struct OptArgs {
  std::string input;
  std::string passes;
  std::string output;
  std::vector<std::string> print_ir_after;
  bool print_ir_after_change = false;
  bool verify_each = false;
  std::string dump_dir;
};

int runOpt(const OptArgs& a) {
  auto names = splitPassList(a.passes);
  if (!names) return reportError(Error{"--passes: " + names.error().message});
  auto pipeline = resolvePipeline(*names, "--passes");
  if (!pipeline) return reportError(pipeline.error());
  for (const std::string& n : a.print_ir_after)
    if (!findPass(n))
      return reportError(Error{"--print-ir-after: unknown pass '" + n + "' (known: " + knownPassNames() + ")"});
  auto text = readFile(a.input);
  if (!text) return reportError(text.error());
  bool json = a.input.size() >= 5 && a.input.compare(a.input.size() - 5, 5, ".json") == 0;
  auto g = json ? graphFromJsonText(*text, a.input) : parseGraph(*text, a.input);
  if (!g) return reportError(g.error());
  if (Status s = verify(*g); !s) return reportError(Error{a.input + ": " + s.error().message});
  PassContext ctx;  // default training options: cross_entropy, AdamW
  PassManagerOptions o{.print_ir_after = {a.print_ir_after.begin(), a.print_ir_after.end()},
                       .print_ir_after_change = a.print_ir_after_change,
                       .verify_each = a.verify_each,
                       .dump_dir = a.dump_dir,
                       .out = &std::cerr};
  if (Status s = runPipeline(*g, ctx, *pipeline, o); !s) return reportError(Error{a.input + ": " + s.error().message});
  std::string result = printGraph(*g);
  if (a.output.empty() || a.output == "-") {
    std::cout << result;
    return 0;
  }
  if (Status s = writeFileAtomic(a.output, result); !s) return reportError(s.error());
  return 0;
}

}  // namespace

void addOptCommand(CLI::App& app) {
  auto a = std::make_shared<OptArgs>();
  CLI::App* sub =
      app.add_subcommand("opt", "run passes over a text-IR graph and print the result (kiln passes lists them)");
  sub->add_option("graph", a->input, "a .kir text-IR file or a .json graph")->required();
  sub->add_option("--passes", a->passes, "the passes to run, a,b,c")->required();
  sub->add_option("-o,--output", a->output, "write the text IR here instead of stdout");
  sub->add_option("--print-ir-after", a->print_ir_after, "print the text IR after this pass to stderr (repeatable)");
  sub->add_flag("--print-ir-after-change", a->print_ir_after_change, "print the IR after every pass that changed it");
  sub->add_flag("--verify-each", a->verify_each, "verify the graph after every pass (else once at the end)");
  sub->add_option("--dump-dir", a->dump_dir, "write the text IR before and after every pass into this directory");
  sub->callback([a] {
    int rc = runOpt(*a);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
