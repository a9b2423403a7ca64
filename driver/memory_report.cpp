#include "driver/memory_report.h"

#include <algorithm>
#include <iomanip>
#include <unordered_map>

#include "core/op_table.h"

#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::driver {
namespace {

const char* kindOf(const BufferLife& b) {
  return b.graph_input ? "input" : b.escapes ? "returned" : "intermediate";
}

/// "conv2d @layer1.0.conv1" for what a node makes, the name for a graph input.
std::string producerOf(const BufferLife& b) {
  const Node* n = b.value->producer();
  if (!n) return b.value->name();
  return n->scope().empty() ? n->op() : n->op() + " @" + n->scope();
}

std::string bytesStr(uint64_t b) {
  return humanCount(static_cast<double>(b), "B");
}

enum Category { kParameters, kOptimizerState, kGradients, kActivations, kTemporaries, kCommunication, kBatch, kOutputs };

/// Each buffer's category (memoryCategoryNames), from the graph's roles and
/// the data flow: a node is part of the backward when its provenance says
/// "grad of" or it reads what the backward made (as kiln-studio folds it);
/// an optimizer node reads optimizer state or makes a parameter's or the
/// state's update.
std::vector<Category> categorize(const Liveness& l, const Graph& g) {
  std::unordered_map<const Value*, OutputRole> role;
  for (const GraphOutput& o : g.outputs()) role.emplace(o.value, o.role);
  std::unordered_map<const Node*, bool> backward, optimizer;
  for (const Node* n : l.order) {
    bool b = n->provenance().find("grad of ") != std::string::npos, opt = false;
    for (const Value* v : n->inputs()) {
      if (const Node* p = v->producer()) b = b || backward[p];
      opt = opt || v->role() == ValueRole::OptState;
    }
    for (const Value* v : n->outputs())
      if (auto it = role.find(v); it != role.end())
        opt = opt || it->second == OutputRole::ParamUpdate || it->second == OutputRole::OptStateUpdate;
    backward[n] = b;
    optimizer[n] = opt;
  }
  std::vector<Category> out;
  for (const BufferLife& b : l.buffers) {
    const Value* v = b.value;
    const Node* n = v->producer();
    Category c = kTemporaries;
    if (!n) {
      c = v->role() == ValueRole::Param || v->role() == ValueRole::Buffer ? kParameters
          : v->role() == ValueRole::OptState                             ? kOptimizerState
                                                                          : kBatch;
    } else if (auto it = role.find(v); it != role.end()) {
      switch (it->second) {
        case OutputRole::ParamUpdate:
        case OutputRole::BufferUpdate:
          c = kParameters;
          break;
        case OutputRole::OptStateUpdate:
          c = kOptimizerState;
          break;
        case OutputRole::Gradient:
          c = kGradients;
          break;
        default:
          c = kOutputs;
      }
    } else if (n->def().has(kCollective)) {
      c = kCommunication;
    } else if (backward[n]) {
      // A parameter's gradient goes to the optimizer, or first to a collective.
      for (const Use& u : v->uses())
        if (optimizer[u.user] || u.user->def().has(kCollective)) c = kGradients;
    } else {
      // Made by the forward: an activation when the backward reads it.
      for (const Use& u : v->uses())
        if (backward[u.user]) c = kActivations;
    }
    out.push_back(c);
  }
  return out;
}

/// The bytes of each category at the peak, as the timeline counts them:
/// graph inputs always, the others from their producer to their last use.
std::vector<ReportCategory> peakByCategory(const MemoryPlan& p, const std::vector<Category>& cats) {
  const auto& names = memoryCategoryNames();
  std::vector<ReportCategory> out;
  for (const std::string& n : names) out.push_back({n, 0});
  for (size_t i = 0; i < p.liveness.buffers.size(); ++i) {
    const BufferLife& b = p.liveness.buffers[i];
    if (b.graph_input || (b.def <= p.peak_node && p.peak_node <= b.last)) out[cats[i]].bytes += b.bytes;
  }
  return out;
}

std::vector<ReportCategory> peakByCategory(const MemoryPlan& p, const Graph& g) {
  return peakByCategory(p, categorize(p.liveness, g));
}

}  // namespace

const std::vector<std::string>& memoryCategoryNames() {
  static const std::vector<std::string> names{"parameters",    "optimizer state", "gradients", "activations",
                                              "temporaries",   "communication",   "batch",     "outputs"};
  return names;
}

ReportMemory memoryReport(const MemoryPlan& p, const Graph* graph) {
  const Liveness& l = p.liveness;
  ReportMemory m{"graph order", p.target, p.widened_to_stages, p.peak_bytes, static_cast<int64_t>(p.peak_node),
                 l.order.empty() ? std::string() : l.order[p.peak_node]->describe(), p.op_by_op_peak_bytes,
                 p.input_bytes, p.returned_bytes, p.arena_bytes, p.arena_lower_bound, p.unshared_bytes, p.timeline};
  for (size_t i = 0; i < l.buffers.size(); ++i) {
    const BufferLife& b = l.buffers[i];
    const Node* prod = b.value->producer();
    ReportTensor t{b.value->name(), b.value->type().str(), b.bytes, kindOf(b), producerOf(b),
                   prod ? prod->scope() : std::string(), static_cast<int64_t>(b.def), static_cast<int64_t>(b.last)};
    if (p.offsets[i] >= 0) t.offset = p.offsets[i];
    for (const Value* v : b.views) t.views.push_back(v->name());
    // made by a node the remat pass added to recompute it
    t.rematerialized = prod && prod->provenance().rfind("remat of ", 0) == 0;
    m.tensors.push_back(std::move(t));
  }
  if (graph) {
    const std::vector<Category> cats = categorize(l, *graph);
    for (size_t i = 0; i < l.buffers.size(); ++i) m.tensors[i].category = memoryCategoryNames()[cats[i]];
    m.categories = peakByCategory(p, cats);
  }
  return m;
}

std::string sparkline(const std::vector<uint64_t>& values, size_t width) {
  static const char* kBars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  if (values.empty() || width == 0) return {};
  const size_t n = values.size(), cols = std::min(width, n);
  const uint64_t top = *std::max_element(values.begin(), values.end());
  std::string s;
  for (size_t c = 0; c < cols; ++c) {
    uint64_t m = 0;
    for (size_t i = c * n / cols; i < (c + 1) * n / cols; ++i) m = std::max(m, values[i]);
    const size_t level = top ? static_cast<size_t>(static_cast<double>(m) / static_cast<double>(top) * 7.0 + 0.5) : 0;
    s += kBars[std::min<size_t>(level, 7)];
  }
  return s;
}

void printMemorySummary(std::ostream& os, const MemoryPlan& p, size_t top, size_t width, const Graph* graph) {
  const Liveness& l = p.liveness;
  os << "peak " << bytesStr(p.peak_bytes);
  if (!l.order.empty())
    os << " while node " << p.peak_node << " of " << l.order.size() << " runs: " << l.order[p.peak_node]->describe();
  os << "\n"
     << "  inputs (weights, optimizer state, batch)  " << bytesStr(p.input_bytes) << "\n"
     << "  returned (updates, gradients, loss)       " << bytesStr(p.returned_bytes) << "\n"
     << "  op by op, a fresh buffer per tensor, no update in place: peak " << bytesStr(p.op_by_op_peak_bytes)
     << " (planned: " << std::fixed << std::setprecision(2)
     << static_cast<double>(p.peak_bytes) / static_cast<double>(std::max<uint64_t>(p.op_by_op_peak_bytes, 1)) << "x)\n"
     << std::defaultfloat << "  intermediates: arena " << bytesStr(p.arena_bytes) << " (most alive at once "
     << bytesStr(p.arena_lower_bound) << "; a buffer each " << bytesStr(p.unshared_bytes) << ")\n";
  if (graph) {
    os << "  at the peak:";
    const char* sep = " ";
    for (const ReportCategory& c : peakByCategory(p, *graph))
      if (c.bytes) {
        os << sep << c.name << " " << bytesStr(c.bytes);
        sep = ", ";
      }
    os << "\n";
  }
  os << "timeline (" << l.order.size() << " nodes, max per column): " << sparkline(p.timeline, width) << "\n";
  const std::vector<size_t> live = buffersLiveAt(p, p.peak_node);
  os << "largest tensors alive at the peak (" << live.size() << " in all):\n";
  for (size_t k = 0; k < live.size() && k < top; ++k) {
    const BufferLife& b = l.buffers[live[k]];
    os << "  " << std::setw(10) << bytesStr(b.bytes) << "  " << std::left << std::setw(13) << kindOf(b) << std::right
       << b.value->type().str() << "  " << producerOf(b);
    if (!b.graph_input) os << "  (nodes " << b.def << ".." << b.last << ")";
    os << "\n";
  }
}

}  // namespace kiln::driver
