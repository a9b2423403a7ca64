#include "passes/pass_manager.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/file_io.h"
#include "core/graph_cost.h"
#include "core/graph_hash.h"
#include "core/text_ir.h"
#include "core/verifier.h"

namespace kiln {
namespace {

Status dump(const PassManagerOptions& o, size_t index, const std::string& what, const Graph& g) {
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%02zu-", index);
  std::filesystem::path path = std::filesystem::path(o.dump_dir) / (prefix + what + ".kir");
  return writeFileAtomic(path.string(), printGraph(g));
}

Status verifyAfter(const Graph& g, const std::string& pass) {
  Status ok = verify(g);
  if (!ok) return Error{"internal error: the graph after pass '" + pass + "' does not verify: " + ok.error().message};
  return {};
}

}  // namespace

Result<std::vector<std::string>> splitPassList(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) return Error{"empty pass name in '" + list + "' (write a,b,c)"};
    out.push_back(item);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

Result<std::vector<const PassInfo*>> resolvePipeline(const std::vector<std::string>& names, const std::string& where) {
  std::vector<const PassInfo*> out;
  for (const std::string& n : names) {
    const PassInfo* p = findPass(n);
    if (!p) return Error{"unknown pass '" + n + "' in " + where + " (known: " + knownPassNames() + ")"};
    out.push_back(p);
  }
  return out;
}

Status runPipeline(Graph& g, PassContext& ctx, const std::vector<const PassInfo*>& pipeline,
                   const PassManagerOptions& o, std::vector<PassTraceEntry>* trace) {
  std::ostream& out = o.out ? *o.out : std::cerr;
  if (!o.dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.dump_dir, ec);
    if (ec) return Error{"--dump-dir " + o.dump_dir + ": " + ec.message()};
    if (Status s = dump(o, 0, "input", g); !s) return s;
  }
  uint64_t hash = structuralHash(g);
  auto irOf = [](const Graph& graph) {
    return std::make_shared<const std::string>(printGraph(graph, {.value_ids = true}));
  };
  std::shared_ptr<const std::string> ir = o.keep_ir ? irOf(g) : nullptr;
  for (size_t i = 0; i < pipeline.size(); ++i) {
    const PassInfo& p = *pipeline[i];
    if (o.progress && !o.progress(i, pipeline.size(), p.name)) return Error{"cancelled"};
    auto t0 = std::chrono::steady_clock::now();
    auto r = p.run(g, ctx);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r) return Error{"pass '" + std::string(p.name) + "': " + r.error().message};
    if (o.verify_each)
      if (Status s = verifyAfter(g, p.name); !s) return s;
    uint64_t after = structuralHash(g);
    // A pass may under-report; the hash is the ground truth for "changed".
    r->changed = r->changed || after != hash;
    // A plan of an earlier graph would point at values that changed.
    if (r->changed && ctx.memory_plan) ctx.memory_plan.reset();
    hash = after;
    if (o.print_ir_after.count(p.name) || (o.print_ir_after_change && r->changed))
      out << "// ---- IR after " << p.name << (r->changed ? "" : " (unchanged)") << " ----\n" << printGraph(g);
    if (!o.dump_dir.empty())
      if (Status s = dump(o, i + 1, p.name, g); !s) return s;
    std::shared_ptr<const std::string> ir_before = ir;
    if (o.keep_ir && r->changed) ir = irOf(g);
    if (trace)
      trace->push_back({.pass = p.name,
                        .millis = ms,
                        .result = std::move(*r),
                        .nodes_after = g.numNodes(),
                        .hash_after = after,
                        .flops_after = graphFlops(g),
                        .peak_bytes_after = estimatePeakBytes(g, ctx.memory),
                        .ir_before = std::move(ir_before),
                        .ir_after = ir});
  }
  if (!o.verify_each && !pipeline.empty()) {
    Status ok = verify(g);
    if (!ok)
      return Error{
          "internal error: the graph after the pipeline does not verify (rerun with --verify-each to "
          "find the pass): " +
          ok.error().message};
  }
  return {};
}

}  // namespace kiln
