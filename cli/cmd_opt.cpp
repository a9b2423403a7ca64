// kiln opt GRAPH.kir --passes a,b,c [-o OUT.kir]: run passes over a graph
// given as text IR (or JSON) and print the result as text IR -- the tool
// behind the FileCheck golden tests (tests/passes/filecheck/), like
// mlir-opt. The PassManager switches (--print-ir-after, --verify-each,
// --dump-dir) work as in kiln train; --freeze sets the frozen parameters
// for the freeze pass.
#include <iostream>
#include <memory>

#include "driver/model_args.h"
#include "cli/commands.h"
#include "driver/pass_flags.h"
#include "core/file_io.h"
#include "core/graph_json.h"
#include "core/text_ir.h"
#include "core/verifier.h"
#include "passes/freeze.h"
#include "driver/messages.h"
#include "driver/byte_size.h"

namespace kiln::cli {
namespace {

struct OptArgs {
  std::string input;
  std::string output;
  PassFlags flags;
  std::vector<std::string> freeze;  ///< --freeze patterns for the freeze pass
  std::string amp = "none";         ///< --amp for the amp pass
  std::string memory_budget;        ///< --memory-budget for the remat pass
  int nproc = 1;                    ///< --nproc: ranks the data_parallel pass communicates between
  std::string bucket_size = "25MiB";
  std::vector<std::string> sparse_grads;
  int zero = 0;  ///< --zero: ZeRO stage for data_parallel and the optimizer
  int rank = 0;  ///< --rank: whose graph a ZeRO-1 run shows
};

int runOpt(const OptArgs& a) {
  auto pipeline = checkPassFlags(a.flags);
  if (!pipeline) return reportError(pipeline.error());
  auto text = readFile(a.input);
  if (!text) return reportError(text.error());
  bool json = a.input.size() >= 5 && a.input.compare(a.input.size() - 5, 5, ".json") == 0;
  auto g = json ? graphFromJsonText(*text, a.input) : parseGraph(*text, a.input);
  if (!g) return reportError(g.error());
  if (Status s = verify(*g); !s) return reportError(Error{a.input + ": " + s.error().message});
  PassContext ctx;  // default training options: cross_entropy, AdamW
  if (!a.freeze.empty()) {
    std::vector<std::string> params;
    for (const Value* v : g->inputs())
      if (v->role() == ValueRole::Param) params.push_back(v->name());
    auto frozen = resolveFreezePatterns(a.freeze, params);
    if (!frozen) return reportError(Error{a.input + ": " + frozen.error().message});
    ctx.training.frozen = std::move(*frozen);
  }
  auto amp = parseAmpMode(a.amp);
  if (!amp) return reportError(Error{"unknown --amp '" + a.amp + "'; use none, bf16 or fp16"});
  ctx.training.amp.mode = *amp;
  if (!a.memory_budget.empty()) {
    auto b = parseByteSize(a.memory_budget);
    if (!b) return reportError(Error{"--memory-budget: " + b.error().message});
    ctx.training.memory_budget = *b;
  }
  DataParallelOptions& dp = ctx.training.data_parallel;
  dp.world_size = a.nproc;
  auto bucket = parseByteSize(a.bucket_size);
  if (!bucket) return reportError(Error{"--bucket-size: " + bucket.error().message});
  dp.bucket_bytes = *bucket;
  dp.sparse_patterns = a.sparse_grads;
  dp.zero_stage = a.zero;
  dp.rank = a.rank;
  PassManagerOptions o = passManagerOptions(a.flags, &std::cerr);
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
  addPassFlags(sub, a->flags, "the passes to run, a,b,c")->required();
  sub->add_option("--freeze", a->freeze, "parameters the freeze pass freezes: a glob or a name prefix (repeatable)");
  sub->add_option("--amp", a->amp,
                  "mixed precision for the amp pass: none (default), bf16 or fp16 (with loss scaling)");
  sub->add_option("--memory-budget", a->memory_budget, "peak bytes for the remat pass, e.g. 512MiB or 2GiB");
  sub->add_option("--nproc", a->nproc, "ranks for the data_parallel pass (default 1: it changes nothing)");
  sub->add_option("--bucket-size", a->bucket_size, "gradient bytes per allreduce for the data_parallel pass");
  sub->add_option("--sparse-grads", a->sparse_grads, "block-sparse gradients for the data_parallel pass");
  sub->add_option("--zero", a->zero, "ZeRO stage for data_parallel and optimizer (1: sharded optimizer state)")
      ->check(CLI::Range(0, 1));
  sub->add_option("--rank", a->rank, "with --zero 1: the rank whose graph to build (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub->callback([a] {
    int rc = runOpt(*a);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
