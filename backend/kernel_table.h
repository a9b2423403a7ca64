// Kernels by op, and the choice among them. A dialect is a family of kernel
// implementations (cpu, blas, onednn on the host; cuda, cublas, cublaslt,
// cudnn, nvrtc on a GPU). Every kernel names its op, its dialect, a predicate
// on the node and a priority. The choice for a node is the first kernel, in
// dialect order, whose predicate accepts it: by default every dialect counts
// the same and the highest priority wins; `--dialects a,b` keeps only those
// dialects and prefers them in that order, so a user can compare them.
// Autotuning (backend/cpu/cpu_autotune.h, backend/cuda) times every
// applicable kernel instead and keeps the fastest.
//
// The table is a template over the kernel definition because host and device
// kernels have different entry points (KernelDef, cuda::CudaKernelDef); both
// have the fields `op`, `dialect`, `name`, `priority` and `supports`.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir.h"
#include "core/result.h"

namespace kiln {

/// Whether a kernel can run this node (dtypes, shapes, attributes).
using KernelPredicate = bool (*)(const Node& n);

/// Which dialects a selection may use, best first. Empty: all, by priority.
struct DialectOrder {
  std::vector<std::string> dialects;

  bool restricted() const { return !dialects.empty(); }
  /// Position of `d` in the order (0 when unrestricted); -1: not allowed.
  int rank(std::string_view d) const {
    if (dialects.empty()) return 0;
    auto it = std::find(dialects.begin(), dialects.end(), d);
    return it == dialects.end() ? -1 : static_cast<int>(it - dialects.begin());
  }
  /// "cublaslt,cuda" (for messages and cache keys).
  std::string str() const {
    std::string s;
    for (const std::string& d : dialects) s += (s.empty() ? "" : ",") + d;
    return s.empty() ? "all" : s;
  }
};

/// Parse `--dialects a,b,c` against the dialects that exist: an error names
/// an unknown one and lists the known ones; duplicates are an error too.
Result<DialectOrder> parseDialectOrder(std::string_view list, const std::vector<std::string>& known);

template <typename Def>
class KernelTable {
 public:
  /// Register a kernel. Its op must be one the op table has (core/op_names.h):
  /// a kernel for an op that does not exist is a programming error.
  void add(Def k) {
    const std::optional<Op> op = opByName(k.op);
    if (!op) {
      std::fprintf(stderr, "kiln: kernel '%s' registered for unknown op '%s'\n", k.name.c_str(), k.op.c_str());
      std::abort();
    }
    auto& v = by_op_[*op];
    v.push_back(std::move(k));
    std::stable_sort(v.begin(), v.end(), [](const Def& a, const Def& b) { return a.priority > b.priority; });
  }
  /// Best kernel for `n` under `order`, or nullptr.
  const Def* select(const Node& n, const DialectOrder& order = {}) const {
    auto all = applicable(n, order);
    return all.empty() ? nullptr : all.front();
  }
  /// Every kernel whose dialect `order` allows and whose predicate accepts
  /// `n`, best first (dialect order, then priority).
  std::vector<const Def*> applicable(const Node& n, const DialectOrder& order = {}) const {
    std::vector<const Def*> out;
    for (const Def* k : candidates(n.kind()))
      if (order.rank(k->dialect) >= 0 && (!k->supports || k->supports(n))) out.push_back(k);
    std::stable_sort(out.begin(), out.end(),
                     [&](const Def* a, const Def* b) { return order.rank(a->dialect) < order.rank(b->dialect); });
    return out;
  }
  /// Every kernel registered for `op`, by priority.
  std::vector<const Def*> candidates(Op op) const {
    std::vector<const Def*> out;
    if (auto it = by_op_.find(op); it != by_op_.end())
      for (const Def& k : it->second) out.push_back(&k);
    return out;
  }
  /// The same by the op's name (listings, cached choices); none for a name
  /// that is not an op.
  std::vector<const Def*> candidates(std::string_view op) const {
    const std::optional<Op> id = opByName(op);
    return id ? candidates(*id) : std::vector<const Def*>{};
  }
  /// The kernel called `name` (a cached choice), or nullptr.
  const Def* byName(std::string_view op, std::string_view name) const {
    for (const Def* k : candidates(op))
      if (k->name == name) return k;
    return nullptr;
  }
  /// Ops that have at least one kernel.
  std::vector<std::string> ops() const {
    std::vector<std::string> out;
    for (const auto& [op, _] : by_op_) out.emplace_back(opName(op));
    return out;
  }
  /// Every dialect some kernel belongs to, sorted.
  std::vector<std::string> dialects() const {
    std::vector<std::string> out;
    for (const auto& [_, defs] : by_op_)
      for (const Def& k : defs)
        if (std::find(out.begin(), out.end(), k.dialect) == out.end()) out.push_back(k.dialect);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::map<Op, std::vector<Def>> by_op_;  ///< in op-name order (KILN_OP_LIST is sorted)
};

/// Why no kernel fits `n` under `order`: the dialects that do have a kernel
/// accepting it (or that none does at all). For "no kernel" errors.
template <typename Def>
std::string whyNoKernel(const KernelTable<Def>& table, const Node& n, const DialectOrder& order) {
  std::vector<std::string> have;
  for (const Def* k : table.applicable(n))
    if (std::find(have.begin(), have.end(), k->dialect) == have.end()) have.push_back(k->dialect);
  if (have.empty()) return "no kernel accepts it";
  return "dialects " + order.str() + " have none; " + DialectOrder{have}.str() + " would";
}

/// Nodes without a kernel, gathered for one error line: by reason, then op,
/// "89 nodes: add x13, adam_update x29, ... (dialects blas have none; cpu
/// would)"; a single node is named with its scope.
class MissingKernels {
 public:
  void add(const Node& n, const std::string& why) {
    ++by_why_[why][n.op()];
    if (total_++ == 0) first_ = n.describe();
  }
  bool empty() const { return total_ == 0; }
  std::string str() const {
    if (total_ == 1) return first_ + " (" + by_why_.begin()->first + ")";
    std::string s = std::to_string(total_) + " nodes:";
    for (const auto& [why, ops] : by_why_) {
      std::string list;
      for (const auto& [op, count] : ops)
        list += (list.empty() ? " " : ", ") + op + (count > 1 ? " x" + std::to_string(count) : "");
      s += list + " (" + why + ")";
    }
    return s;
  }

 private:
  std::map<std::string, std::map<std::string, size_t>> by_why_;
  size_t total_ = 0;
  std::string first_;
};

}  // namespace kiln
