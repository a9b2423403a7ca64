// The PassManager runs a pipeline (a list of registered pass names) over a
// graph, and is where the debugging switches live: print the IR after a
// pass or after every pass that changed something, verify after every
// pass, dump the IR after every pass into a directory. Every pass run
// becomes a trace entry (name, time, changed, node count, flops, estimated
// peak memory, structural hash, the pass's own statistics) for reports
// (`kiln compile --report`) and `kiln train --verbose`.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "passes/pass.h"
#include "passes/pass_registry.h"

namespace kiln {

/// What one pass did.
struct PassTraceEntry {
  std::string pass;
  double millis = 0;
  PassResult result;  ///< result.changed: the pass said so, or the hash moved
  size_t nodes_after = 0;
  uint64_t hash_after = 0;        ///< structuralHash of the graph after the pass
  double flops_after = 0;         ///< graphFlops of the graph after the pass (core/graph_cost.h)
  uint64_t peak_bytes_after = 0;  ///< estimatePeakBytes of the graph after the pass
  /// With PassManagerOptions::keep_ir: the text IR before and after the pass
  /// (values numbered by id); one shared string when the pass changed nothing.
  std::shared_ptr<const std::string> ir_before, ir_after;
};

struct PassManagerOptions {
  /// Print the text IR after these passes (--print-ir-after=NAME, repeatable).
  std::set<std::string> print_ir_after;
  /// Print the text IR after every pass that changed the graph.
  bool print_ir_after_change = false;
  /// Run the verifier after every pass (it always runs once at the end).
  bool verify_each = false;
  /// If set, write NN-PASS.kir (the text IR after each pass) into it, and
  /// 00-input.kir before the first.
  std::string dump_dir;
  /// Where the printed IR goes (stderr when null).
  std::ostream* out = nullptr;
  /// Keep each pass's IR before and after in its trace entry (kiln compile
  /// --report-pass-ir, kiln-studio's passes view).
  bool keep_ir = false;
  /// Called before each pass with its index, the pipeline's length and its
  /// name; returning false stops the pipeline with the error "cancelled"
  /// (kiln-studio's compile progress and Cancel).
  std::function<bool(size_t index, size_t count, const std::string& pass)> progress;
};

/// A list of pass names, checked against the registry up front so a typo
/// fails before any pass runs: "unknown pass 'dcee' in --passes (known: ...)".
Result<std::vector<const PassInfo*>> resolvePipeline(const std::vector<std::string>& names,
                                                     const std::string& where = "the pipeline");

/// "a,b,c" -> {"a", "b", "c"} (empty items are an error).
Result<std::vector<std::string>> splitPassList(const std::string& list);

/// Run `pipeline` over `g` in place, appending one entry per pass to
/// `trace` (when given). Errors name the pass: "pass 'autodiff': ...";
/// a graph that stops verifying is an internal error naming the pass that
/// broke it (after every pass with verify_each, else found at the end).
Status runPipeline(Graph& g, PassContext& ctx, const std::vector<const PassInfo*>& pipeline,
                   const PassManagerOptions& options = {}, std::vector<PassTraceEntry>* trace = nullptr);

}  // namespace kiln
