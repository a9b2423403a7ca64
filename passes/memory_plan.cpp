// memory_plan (see memory_plan.h for what it does, needs and guarantees).
#include "passes/memory_plan.h"

#include <algorithm>
#include <memory>

namespace kiln {
namespace {

bool overlapInTime(const BufferLife& a, const BufferLife& b) {
  return a.def <= b.last && b.def <= a.last;
}

/// Each buffer lives from the start of its producer's stage to the end of
/// its last reader's.
void widenToStages(Liveness& l, const NodeStages& stages) {
  std::vector<std::pair<size_t, size_t>> span(l.order.size());
  for (const auto& [first, end] : stages)
    for (size_t i = first; i < end && i < span.size(); ++i) span[i] = {first, end - 1};
  for (BufferLife& b : l.buffers) {
    if (b.graph_input || b.def >= span.size()) continue;
    b.def = span[b.def].first;
    if (b.last < span.size()) b.last = span[b.last].second;
  }
}

}  // namespace

/// Places the buffers of `live` (with writes in place); `plain` (views
/// only) gives the op-by-op baseline.
MemoryPlan planLiveness(Liveness live, const Liveness& plain, const NodeStages* stages) {
  MemoryPlan p;
  p.liveness = std::move(live);
  if (stages) {
    widenToStages(p.liveness, *stages);
    p.widened_to_stages = std::any_of(stages->begin(), stages->end(), [](const auto& s) { return s.second - s.first > 1; });
  }
  const std::vector<BufferLife>& bufs = p.liveness.buffers;
  p.offsets.assign(bufs.size(), -1);
  p.timeline = liveBytesTimeline(p.liveness);

  std::vector<size_t> planned;
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (bufs[i].graph_input)
      p.input_bytes += bufs[i].bytes;
    else if (bufs[i].escapes)
      p.returned_bytes += bufs[i].bytes;
    else
      planned.push_back(i);
  }
  p.peak_bytes = p.input_bytes;
  if (!p.timeline.empty()) {
    auto top = std::max_element(p.timeline.begin(), p.timeline.end());  // the first peak
    p.peak_node = static_cast<size_t>(top - p.timeline.begin());
    p.peak_bytes = std::max(p.peak_bytes, *top);
  }

  p.op_by_op_peak_bytes = p.input_bytes;
  for (uint64_t bytes : liveBytesTimeline(plain)) p.op_by_op_peak_bytes = std::max(p.op_by_op_peak_bytes, bytes);

  // Lower bound: the planned bytes alive at the busiest node.
  std::vector<uint64_t> made(p.liveness.order.size() + 1), freed(p.liveness.order.size() + 1);
  for (size_t i : planned) {
    made[bufs[i].def] += arenaSize(bufs[i].bytes);
    freed[bufs[i].last] += arenaSize(bufs[i].bytes);
    p.unshared_bytes += arenaSize(bufs[i].bytes);
  }
  for (size_t i = 0, live = 0; i < p.liveness.order.size(); ++i) {
    live += made[i];
    p.arena_lower_bound = std::max<uint64_t>(p.arena_lower_bound, live);
    live -= freed[i];
  }

  // Greedy by size: largest first (ties: earlier first, so plans are
  // deterministic), each at the lowest gap between the placed buffers whose
  // lifetimes overlap its own.
  std::stable_sort(planned.begin(), planned.end(), [&](size_t a, size_t b) {
    if (bufs[a].bytes != bufs[b].bytes) return bufs[a].bytes > bufs[b].bytes;
    return bufs[a].def < bufs[b].def;
  });
  std::vector<size_t> placed;
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // [offset, end) of overlapping placed buffers
  for (size_t i : planned) {
    const uint64_t size = arenaSize(bufs[i].bytes);
    busy.clear();
    for (size_t j : placed)
      if (overlapInTime(bufs[i], bufs[j])) busy.emplace_back(p.offsets[j], p.offsets[j] + arenaSize(bufs[j].bytes));
    std::sort(busy.begin(), busy.end());
    uint64_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo >= at + size) break;  // fits in the gap before this one
      at = std::max(at, hi);
    }
    p.offsets[i] = static_cast<int64_t>(at);
    p.arena_bytes = std::max(p.arena_bytes, at + size);
    placed.push_back(i);
  }
  return p;
}

MemoryPlan planMemory(const Graph& g, const ViewPredicate& is_view, const InPlaceUpdates* in_place,
                      const NodeStages* stages) {
  return planLiveness(analyzeLiveness(g, is_view, in_place), analyzeLiveness(g, is_view), stages);
}

MemoryPlan planMemory(const StepLiveness& step, const std::string& target, const NodeStages* stages) {
  MemoryPlan p = planLiveness(step.live, step.plain, stages);
  p.target = target;
  p.updates_in_place = step.updates.size();
  p.elementwise_in_place = step.elementwise.size();
  return p;
}

MemoryPlan planMemory(const Graph& g, const MemoryRules& rules, const NodeStages* stages) {
  return planMemory(analyzeStepLiveness(g, rules), rules.target, stages);
}

std::shared_ptr<const MemoryPlan> reusablePlan(std::shared_ptr<const MemoryPlan> plan, const Graph& g,
                                               const MemoryRules& rules, const NodeStages& stages) {
  if (!plan || plan->target != rules.target || plan->widened_to_stages) return nullptr;
  if (std::any_of(stages.begin(), stages.end(), [](const auto& s) { return s.second - s.first > 1; })) return nullptr;
  const std::vector<const Node*>& order = plan->liveness.order;
  if (order.size() != g.numNodes()) return nullptr;
  size_t i = 0;
  for (const auto& n : g.nodes())
    if (order[i++] != n.get()) return nullptr;
  return plan;
}

Result<PassResult> runMemoryPlan(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    auto plan = std::make_shared<MemoryPlan>(planMemory(g, ctx.memory));
    plan->made_by = "memory_plan pass";
    ctx.memory_plan = plan;
    const MemoryPlan& p = *plan;
    PassResult r;
    r.statistics = {{"arena_bytes", static_cast<double>(p.arena_bytes)},
                    {"arena_lower_bound", static_cast<double>(p.arena_lower_bound)},
                    {"unshared_bytes", static_cast<double>(p.unshared_bytes)},
                    {"peak_bytes", static_cast<double>(p.peak_bytes)},
                    {"op_by_op_peak_bytes", static_cast<double>(p.op_by_op_peak_bytes)},
                    {"updates_in_place", static_cast<double>(p.updates_in_place)},
                    {"elementwise_in_place", static_cast<double>(p.elementwise_in_place)}};
    return r;
  });
}

Status checkPlan(const MemoryPlan& p) {
  const std::vector<BufferLife>& bufs = p.liveness.buffers;
  std::vector<size_t> placed;
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (p.offsets[i] < 0) {
      if (bufs[i].planned()) return Error{"memory plan: " + bufs[i].value->name() + " has no offset"};
      continue;
    }
    const uint64_t at = static_cast<uint64_t>(p.offsets[i]);
    if (at % kArenaAlignment != 0 || at + arenaSize(bufs[i].bytes) > p.arena_bytes)
      return Error{"memory plan: " + bufs[i].value->name() + " at offset " + std::to_string(at) +
                   " is unaligned or outside the arena of " + std::to_string(p.arena_bytes) + " bytes"};
    placed.push_back(i);
  }
  for (size_t x = 0; x < placed.size(); ++x)
    for (size_t y = x + 1; y < placed.size(); ++y) {
      const BufferLife &a = bufs[placed[x]], &b = bufs[placed[y]];
      if (!overlapInTime(a, b)) continue;
      const uint64_t ao = p.offsets[placed[x]], bo = p.offsets[placed[y]];
      if (ao < bo + arenaSize(b.bytes) && bo < ao + arenaSize(a.bytes))
        return Error{"memory plan: " + a.value->name() + " and " + b.value->name() +
                     " are alive together but overlap in the arena"};
    }
  return {};
}

std::vector<size_t> buffersLiveAt(const MemoryPlan& p, size_t at) {
  std::vector<size_t> live;
  const std::vector<BufferLife>& bufs = p.liveness.buffers;
  for (size_t i = 0; i < bufs.size(); ++i)
    if (bufs[i].graph_input || (bufs[i].def <= at && at <= bufs[i].last)) live.push_back(i);
  std::stable_sort(live.begin(), live.end(), [&](size_t a, size_t b) { return bufs[a].bytes > bufs[b].bytes; });
  return live;
}

}  // namespace kiln
