// remat (see remat.h for what it does, needs and guarantees).
#include "passes/remat.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/graph_cost.h"
#include "core/liveness.h"
#include "core/op_table.h"

namespace kiln {
namespace {

constexpr int kMaxDepth = 4;         // producers recomputed behind one value
constexpr int kMaxAttempts = 20000;  // candidates tried, kept or undone

/// 1000 B, 12.5 KiB, 300.2 MiB, 1.50 GiB: the units --memory-budget takes.
std::string bytesText(uint64_t b) {
  char buf[32];
  const double d = static_cast<double>(b);
  if (b < 1024)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < (1u << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", d / 1024);
  else if (b < (1u << 30))
    std::snprintf(buf, sizeof buf, "%.1f MiB", d / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1 << 30));
  return buf;
}

/// Whether computing `n` again gives the same values: not a random op,
/// except dropout that drops nothing (p = 0, as exported for parity runs).
bool deterministic(const Node& n) {
  if (!n.def().has(kRandom)) return true;
  return n.is(Op::dropout) && (n.f("p") == 0 || n.i("training") == 0);
}

/// The timeline of the graph's order, as estimatePeakBytes counts it (under
/// the target's memory rules).
struct Timeline {
  /// Buffers with updates in place but each elementwise result in its own:
  /// where candidates come from (a result written over a dying input shares
  /// its buffer only in the order that runs now; recomputing the input
  /// changes who reads it last).
  Liveness live;
  std::vector<uint64_t> bytes;  ///< with every write in place (analyzeStepLiveness)
  uint64_t peak = 0, area = 0;
  size_t peak_node = 0;
};

Timeline timelineOf(const Graph& g, const MemoryRules& rules) {
  Timeline t;
  StepLiveness s = analyzeStepLiveness(g, rules);
  t.live = analyzeLiveness(g, rules.is_view, &s.updates);
  t.bytes = liveBytesTimeline(s.live);
  for (size_t i = 0; i < t.bytes.size(); ++i) {
    t.area += t.bytes[i];
    if (t.bytes[i] > t.peak) {
      t.peak = t.bytes[i];
      t.peak_node = i;
    }
  }
  return t;
}

/// Seconds to run `n` again, roughly: its flops at a GEMM's rate or its
/// bytes at memory speed, whichever takes longer, plus a fixed cost per node
/// (dispatch, a parallel region). Counting flops alone made copies and
/// permutes look free and long chains of small ops cheap; on a CPU each
/// costs microseconds. Not the stages' one-thread estimate
/// (node_stages.h estimatedMicros): a recomputed node runs on the whole
/// pool, where vectorized elementwise loops are not 15x slower per flop
/// than a GEMM; ranked by that estimate, remat recomputed convolutions
/// instead and resnet_mini's budgeted step cost +60% instead of +27%.
double recomputeSeconds(const Node& n) {
  constexpr double kFlopsPerSecond = 20e9, kBytesPerSecond = 5e9, kPerNode = 4e-6;
  const Cost c = nodeCost(n);
  return std::max(c.flops / kFlopsPerSecond, c.bytes / kBytesPerSecond) + kPerNode;
}

/// A value to recompute: the nodes that make it again (in order) and where.
struct Candidate {
  Value* value = nullptr;        ///< the buffer's owner
  std::vector<Value*> members;   ///< the owner and its views (reshape, ...): what readers read
  std::vector<Node*> recompute;  ///< producers, inputs first
  /// Inputs of the recompute dead at `before` read from a copy remat made
  /// after the peak instead (its life extended) rather than recomputed again.
  std::unordered_map<const Value*, Value*> reuse;
  size_t before = 0;  ///< index of the first reader after the peak
  double score = 0;   ///< bytes freed per second of recompute
};

class Remat {
 public:
  Remat(Graph& g, uint64_t budget, const MemoryRules& rules) : g_(g), budget_(budget), rules_(rules) {}

  PassResult run() {
    Timeline t = timelineOf(g_, rules_);
    const uint64_t before = t.peak;
    uint64_t inputs = 0;
    for (const Value* v : g_.inputs()) inputs += v->type().bytes();
    int attempts = 0;
    while (t.peak > budget_ && attempts < kMaxAttempts) {
      peak_ = t.peak_node;
      std::vector<Candidate> cands = candidatesAt(t);
      std::erase_if(cands, [&](const Candidate& c) { return rejected_.count({c.value, !c.reuse.empty()}); });
      if (cands.empty()) break;
      const Candidate& best = *std::max_element(
          cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.score < b.score; });
      ++attempts;
      Applied applied = apply(best, t.live.order);
      Timeline next = timelineOf(g_, rules_);
      if (next.peak < t.peak || (next.peak == t.peak && next.area < t.area)) {
        ++recomputed_;
        nodes_added_ += applied.clones.size();
        for (const Node* n : applied.clones) flops_added_ += nodeCost(*n).flops;
        for (size_t k = 0; k < applied.clones.size(); ++k)
          for (size_t o = 0; o < applied.clones[k]->numOutputs(); ++o) {
            const Value* orig = originalOf(applied.sources[k]->output(o));
            copies_[orig].push_back(applied.clones[k]->output(o));
            original_[applied.clones[k]->output(o)] = orig;
          }
        t = std::move(next);
      } else {
        undo(applied);
        rejected_.insert({best.value, !best.reuse.empty()});
      }
    }
    if (t.peak > budget_) {
      // What no recompute can free: the peak node's own inputs and outputs.
      const Node& at = *t.live.order[t.peak_node];
      std::unordered_set<const Value*> own;
      uint64_t node_bytes = 0;
      for (const Value* v : at.inputs())
        if (!v->isGraphInput() && own.insert(t.live.buffers[t.live.buffer_of.at(v)].value).second)
          node_bytes += v->type().bytes();
      for (const Value* v : at.outputs()) node_bytes += v->type().bytes();
      fail("the memory budget of " + bytesText(budget_) + " cannot be met: the smallest peak remat reached is " +
           bytesText(t.peak) + " (" + bytesText(before) +
           " without it; weights, optimizer state and batch alone take " + bytesText(inputs) + ", and " +
           at.describe() + " there reads and writes " + bytesText(node_bytes) + " more)");
    }
    PassResult r;
    r.changed = recomputed_ > 0;
    r.statistics = {
        {"budget", static_cast<double>(budget_)},           {"peak_before", static_cast<double>(before)},
        {"peak_after", static_cast<double>(t.peak)},        {"values_recomputed", static_cast<double>(recomputed_)},
        {"nodes_added", static_cast<double>(nodes_added_)}, {"flops_added", flops_added_}};
    return r;
  }

 private:
  struct Applied {
    std::vector<Node*> clones;
    std::vector<const Node*> sources;  // what each clone copies
    struct Moved {
      Node* user;
      size_t index;
      Value* from;
    };
    std::vector<Moved> redirected;  // uses moved from a value to its clone
  };

  /// Intermediates alive across the peak node without being read there.
  std::vector<Candidate> candidatesAt(const Timeline& t) const {
    const auto& order = t.live.order;
    std::unordered_map<const Node*, size_t> pos;
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
    // Last position each value is needed (graph outputs: the end).
    std::unordered_map<const Value*, size_t> last;
    for (size_t i = 0; i < order.size(); ++i)
      for (const Value* v : order[i]->inputs()) last[v] = i;
    for (const GraphOutput& o : g_.outputs()) last[o.value] = SIZE_MAX;
    const size_t p = t.peak_node;
    std::vector<Candidate> out;
    for (const BufferLife& b : t.live.buffers) {
      if (!b.planned() || b.def >= p || b.last <= p) continue;
      Candidate c{.value = const_cast<Value*>(b.value)};
      c.members.push_back(c.value);
      bool views_only = true;  // an update written in place shares a buffer too: not recomputable here
      for (const Value* v : b.views) {
        views_only = views_only && v->producer() && v->producer()->numInputs() > 0 && mayAliasInput(*v->producer());
        c.members.push_back(const_cast<Value*>(v));
      }
      if (!views_only) continue;
      size_t after = SIZE_MAX;
      bool read_at_peak = false;
      for (const Value* m : c.members)
        for (const Use& u : m->uses()) {
          const size_t at = pos.at(u.user);
          if (at == p) read_at_peak = true;
          if (at > p) after = std::min(after, at);
        }
      if (read_at_peak || after == SIZE_MAX) continue;
      c.before = after;
      for (const bool reuse : {false, true}) {
        Candidate v = c;
        std::unordered_set<const Node*> seen;
        if (!collect(v.value->producer(), after, last, pos, 0, seen, v.recompute, reuse ? &v.reuse : nullptr)) continue;
        if (reuse && v.reuse.empty()) continue;  // the same as the first
        finish(v, pos, b.bytes);
        out.push_back(std::move(v));
      }
    }
    return out;
  }

  /// Adds the views `c` must make again and its score.
  void finish(Candidate& c, const std::unordered_map<const Node*, size_t>& pos, uint64_t bytes) const {
    const size_t after = c.before;
    // The views made before `after` whose values (or views of them) are read from there on.
    std::unordered_set<const Value*> needed;
    for (auto it = c.members.rbegin(); it != std::prev(c.members.rend()); ++it) {
      const Node* view = (*it)->producer();
      if (pos.at(view) >= after) continue;  // made after the recompute point: reads the clone
      bool read_later = needed.count(*it) > 0;
      for (const Use& u : (*it)->uses()) read_later = read_later || pos.at(u.user) >= after;
      if (read_later) needed.insert(view->input(0));
    }
    for (size_t k = 1; k < c.members.size(); ++k) {
      Node* view = c.members[k]->producer();
      if (pos.at(view) >= after) continue;
      bool read_later = needed.count(c.members[k]) > 0;
      for (const Use& u : c.members[k]->uses()) read_later = read_later || pos.at(u.user) >= after;
      if (read_later) c.recompute.push_back(view);
    }
    double seconds = 0;
    for (const Node* n : c.recompute) seconds += recomputeSeconds(*n);
    c.score = static_cast<double>(bytes) / seconds;
  }

  /// Adds `n` and the producers it needs (inputs first) to `out`; false when
  /// it cannot be recomputed at index `at`.
  /// With `reuse`, an input dead at `at` is read from the newest copy of it
  /// remat made after the peak (recorded in `reuse`) instead of made again.
  bool collect(const Node* n, size_t at, const std::unordered_map<const Value*, size_t>& last,
               const std::unordered_map<const Node*, size_t>& pos, int depth, std::unordered_set<const Node*>& seen,
               std::vector<Node*>& out, std::unordered_map<const Value*, Value*>* reuse) const {
    if (!seen.insert(n).second) return true;
    if (depth > kMaxDepth || !deterministic(*n) || n->def().has(kSideEffect)) return false;
    for (const Value* in : n->inputs()) {
      if (in->isGraphInput()) continue;
      auto l = last.find(in);
      if (l != last.end() && l->second >= at) continue;  // alive there anyway
      if (reuse) {
        if (Value* copy = copyMadeBetween(in, peak_, at, pos)) {
          (*reuse)[in] = copy;
          continue;
        }
      }
      if (!collect(in->producer(), at, last, pos, depth + 1, seen, out, reuse)) return false;
    }
    out.push_back(const_cast<Node*>(n));
    return true;
  }

  /// The original a value copies (itself if it is no copy).
  const Value* originalOf(const Value* v) const {
    auto it = original_.find(v);
    return it == original_.end() ? v : it->second;
  }

  /// The newest copy of `v`'s original made after node `from` and before `to`, or nullptr.
  Value* copyMadeBetween(const Value* v, size_t from, size_t to,
                         const std::unordered_map<const Node*, size_t>& pos) const {
    auto it = copies_.find(originalOf(v));
    if (it == copies_.end()) return nullptr;
    Value* best = nullptr;
    size_t best_at = 0;
    for (Value* c : it->second) {
      auto p = pos.find(c->producer());
      if (p != pos.end() && p->second > from && p->second < to && (!best || p->second > best_at)) {
        best = c;
        best_at = p->second;
      }
    }
    return best;
  }

  Applied apply(const Candidate& c, const std::vector<const Node*>& order) {
    Applied a;
    std::unordered_map<const Node*, size_t> pos;
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
    std::unordered_map<const Value*, Value*> copy(c.reuse.begin(), c.reuse.end());
    g_.setInsertPoint(const_cast<Node*>(order[c.before]));
    for (Node* n : c.recompute) {
      std::vector<Value*> ins;
      for (Value* in : n->inputs()) ins.push_back(copy.count(in) ? copy.at(in) : in);
      Node* k = g_.create(n->op(), ins, n->attrs(), n->scope(), "remat of " + n->describe());
      for (size_t i = 0; i < n->numOutputs(); ++i) copy[n->output(i)] = k->output(i);
      a.clones.push_back(k);
      a.sources.push_back(n);
    }
    g_.setInsertPoint(nullptr);
    for (Value* m : c.members) {
      auto clone = copy.find(m);
      if (clone == copy.end()) continue;
      const std::vector<Use> uses = m->uses();
      for (const Use& u : uses)
        if (pos.count(u.user) && pos.at(u.user) >= c.before) {
          u.user->replaceInput(u.index, clone->second);
          a.redirected.push_back({u.user, u.index, m});
        }
    }
    return a;
  }

  void undo(const Applied& a) {
    for (const Applied::Moved& m : a.redirected) m.user->replaceInput(m.index, m.from);
    for (auto it = a.clones.rbegin(); it != a.clones.rend(); ++it) g_.erase(*it);
  }

  Graph& g_;
  uint64_t budget_;
  const MemoryRules& rules_;
  std::set<std::pair<const Value*, bool>> rejected_;              // (value, with reuse) tried and undone
  std::unordered_map<const Value*, std::vector<Value*>> copies_;  // original -> the copies remat made
  std::unordered_map<const Value*, const Value*> original_;       // copy -> its original
  size_t peak_ = 0;                                               // the peak node candidates are drawn at
  size_t recomputed_ = 0, nodes_added_ = 0;
  double flops_added_ = 0;
};

}  // namespace

Result<PassResult> runRemat(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    const uint64_t budget = ctx.training.memory_budget;
    if (budget == 0) return PassResult{false, {{"budget", 0.0}}};
    return Remat(g, budget, ctx.memory).run();
  });
}

}  // namespace kiln
