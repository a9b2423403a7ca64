// schedule (see schedule.h for what it does, needs and guarantees).
#include "passes/schedule.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/graph_cost.h"
#include "core/liveness.h"
#include "core/op_table.h"

namespace kiln {
namespace {

constexpr int64_t kNegligibleBytes = 64;

/// The list scheduler's state: per node, what it waits for; per buffer
/// (a value owning storage, views folded into their source), how many nodes
/// still read it.
class ListScheduler {
 public:
  ListScheduler(const Graph& g, const MemoryRules& rules) : rules_(rules) {
    for (const auto& n : g.nodes()) {
      index_[n.get()] = nodes_.size();
      nodes_.push_back(n.get());
    }
    for (const GraphOutput& o : g.outputs()) kept_.insert(root(o.value));
    for (const Value* v : g.inputs()) kept_.insert(v);
    // A collective (a gradient bucket's allreduce) goes as soon as its
    // inputs are ready, and what reads its results as late as possible: the
    // rest of the backward then runs while it travels.
    for (const Node* n : nodes_) {
      const bool reads_collective = std::ranges::any_of(
          n->inputs(), [](const Value* v) { return v->producer() && v->producer()->def().has(kCollective); });
      tier_.push_back(n->def().has(kCollective) ? 0 : reads_collective ? 2 : 1);
    }
    waits_.assign(nodes_.size(), 0);
    next_.resize(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) {
      std::unordered_set<size_t> before;  // distinct nodes this one waits for
      std::unordered_set<const Value*> read;
      for (const Value* in : nodes_[i]->inputs()) {
        if (in->producer()) before.insert(index_.at(in->producer()));
        read.insert(root(in));
      }
      for (const Value* r : read) ++readers_[r];
      reads_.emplace_back(read.begin(), read.end());
      for (size_t b : before) addEdge(b, i);
    }
    // Every rank must issue its collectives in the same order (each one
    // waits for the matching call on the others), and under ZeRO-1 the
    // ranks' graphs differ: keep the collectives' relative order as it is,
    // the same on every rank.
    size_t last_collective = nodes_.size();
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i]->def().has(kCollective)) {
        if (last_collective < nodes_.size()) addEdge(last_collective, i);
        last_collective = i;
      }
    // An update waits for every other reader of the state it replaces.
    const InPlaceUpdates updates = analyzeStepLiveness(g, rules).updates;
    for (const auto& [out, state] : updates) {
      const size_t u = index_.at(out->producer());
      for (const Node* reader : readersOf(state))
        if (reader != out->producer()) addEdge(index_.at(reader), u);
      in_place_.insert(out);
    }
  }

  std::vector<Node*> run() {
    std::vector<size_t> ready;
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (waits_[i] == 0) ready.push_back(i);
    std::vector<Node*> order;
    while (!ready.empty()) {
      auto best = ready.begin();
      int64_t best_net = net(*best);
      for (auto it = std::next(ready.begin()); it != ready.end(); ++it) {
        const int64_t n = net(*it);
        if (tier_[*it] < tier_[*best] || (tier_[*it] == tier_[*best] && prefer(*it, n, *best, best_net))) {
          best = it;
          best_net = n;
        }
      }
      const size_t i = *best;
      ready.erase(best);
      order.push_back(nodes_[i]);
      for (const Value* r : reads_[i]) --readers_[r];
      for (size_t s : next_[i])
        if (--waits_[s] == 0) ready.push_back(s);
    }
    return order;
  }

 private:
  const Value* root(const Value* v) const {
    while (v->producer() && rules_.view(*v->producer())) v = v->producer()->input(0);
    return v;
  }

  /// The nodes that read v's buffer: v's users and the users of its views.
  std::vector<const Node*> readersOf(const Value* v) {
    std::vector<const Node*> out;
    std::vector<const Value*> stack = {v};
    while (!stack.empty()) {
      const Value* x = stack.back();
      stack.pop_back();
      for (const Use& use : x->uses()) {
        out.push_back(use.user);
        if (rules_.view(*use.user) && use.index == 0)
          for (const Value* o : use.user->outputs()) stack.push_back(o);
      }
    }
    return out;
  }

  void addEdge(size_t from, size_t to) {
    if (from == to) return;
    next_[from].push_back(to);
    ++waits_[to];
  }

  /// Whether to run node a (adding na bytes) before node b (adding nb).
  static bool prefer(size_t a, int64_t na, size_t b, int64_t nb) {
    const bool frees_a = na <= 0, frees_b = nb <= 0;
    if (frees_a != frees_b) return frees_a;   // a node that frees what it makes first
    if (frees_a && na != nb) return na < nb;  // of those, the one that frees most
    return a < b;                             // else the current order
  }

  /// Bytes the node would add to the live set: its own buffers less those it reads last.
  int64_t net(size_t i) const {
    int64_t bytes = 0;
    const Node* n = nodes_[i];
    if (!rules_.view(*n))
      for (const Value* o : n->outputs())
        if (!in_place_.count(o)) bytes += static_cast<int64_t>(o->type().bytes());
    // Scalars (the step counter, constants, a clipping coefficient) cost
    // nothing worth ordering for, and often gate what frees the most.
    if (bytes <= kNegligibleBytes) bytes = 0;
    for (const Value* r : reads_[i])
      if (readers_.at(r) == 1 && !kept_.count(r)) bytes -= static_cast<int64_t>(r->type().bytes());
    return bytes;
  }

  std::vector<Node*> nodes_;
  std::unordered_map<const Node*, size_t> index_;
  const MemoryRules& rules_;  // which nodes make views, which updates may be written in place
  std::vector<int> tier_;  // per node: 0 collective, 2 reads a collective's result, 1 the rest (lower first)
  std::vector<size_t> waits_;
  std::vector<std::vector<size_t>> next_;
  std::vector<std::vector<const Value*>> reads_;      // per node: the buffers it reads
  std::unordered_map<const Value*, size_t> readers_;  // buffer -> nodes yet to read it
  std::unordered_set<const Value*> kept_;             // graph inputs and returned buffers: never freed by the step
  std::unordered_set<const Value*> in_place_;
};

}  // namespace

Result<PassResult> runSchedule(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    std::vector<Node*> before;
    for (const auto& n : g.nodes()) before.push_back(n.get());
    const uint64_t peak_before = estimatePeakBytes(g, ctx.memory);
    std::vector<Node*> order = ListScheduler(g, ctx.memory).run();
    if (order.size() != before.size()) fail("schedule: the graph has a cycle");  // the verifier rules it out
    g.reorder(order);
    uint64_t peak_after = estimatePeakBytes(g, ctx.memory);
    if (peak_after >= peak_before) {
      g.reorder(before);
      order = before;
      peak_after = peak_before;
    }
    double moved = 0;
    for (size_t i = 0; i < order.size(); ++i) moved += order[i] != before[i];
    PassResult r;
    r.changed = moved > 0;
    r.statistics = {{"peak_before", static_cast<double>(peak_before)},
                    {"peak_after", static_cast<double>(peak_after)},
                    {"nodes_moved", moved}};
    return r;
  });
}

}  // namespace kiln
