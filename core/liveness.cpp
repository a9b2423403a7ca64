#include "core/liveness.h"

#include <algorithm>

#include "core/graph_cost.h"
#include "core/op_table.h"

namespace kiln {

Liveness analyzeLiveness(const Graph& g, const ViewPredicate& is_view, const InPlaceUpdates* in_place) {
  Liveness l;
  for (const auto& n : g.nodes()) l.order.push_back(n.get());
  const size_t end = l.order.empty() ? 0 : l.order.size() - 1;
  for (const Value* v : g.inputs()) {
    l.buffer_of[v] = l.buffers.size();
    l.buffers.push_back({.value = v, .bytes = v->type().bytes(), .def = 0, .last = end, .graph_input = true});
  }
  for (size_t i = 0; i < l.order.size(); ++i) {
    const Node* n = l.order[i];
    for (const Value* v : n->inputs()) {
      BufferLife& b = l.buffers[l.buffer_of.at(v)];
      b.last = std::max(b.last, i);
    }
    const bool alias = n->numInputs() > 0 && (is_view ? is_view(*n) : mayAliasInput(*n));
    for (const Value* o : n->outputs()) {
      const auto upd = in_place ? in_place->find(o) : InPlaceUpdates::const_iterator();
      if (alias || (in_place && upd != in_place->end())) {
        const size_t src = l.buffer_of.at(alias ? n->input(0) : upd->second);
        l.buffer_of[o] = src;
        l.buffers[src].views.push_back(o);
        l.buffers[src].last = std::max(l.buffers[src].last, i);
        continue;
      }
      l.buffer_of[o] = l.buffers.size();
      // A collective writes its outputs later, from its communication
      // thread or stream; the executor waits for it at the first reader or
      // at the end of the step. An output nothing reads (a sparse gradient
      // another ZeRO-1 rank updates) is therefore written until the end.
      const bool async_unread = n->def().has(kCollective) && o->uses().empty();
      l.buffers.push_back({.value = o, .bytes = o->type().bytes(), .def = i, .last = async_unread ? end : i});
    }
  }
  for (const GraphOutput& o : g.outputs()) {
    BufferLife& b = l.buffers[l.buffer_of.at(o.value)];
    b.escapes = !b.graph_input;
    b.last = end;
  }
  return l;
}

InPlaceUpdates inPlaceCandidates(const Graph& g, const Liveness& l, const std::function<bool(const Node&)>& can_write) {
  // The last node that reads each graph input's buffer, itself or through a view.
  std::unordered_map<const Value*, size_t> last_read;
  for (size_t i = 0; i < l.order.size(); ++i)
    for (const Value* v : l.order[i]->inputs()) last_read[l.buffers[l.buffer_of.at(v)].value] = i;
  // A graph input the step returns (itself or a view) is not overwritten.
  for (const GraphOutput& o : g.outputs()) last_read[l.buffers[l.buffer_of.at(o.value)].value] = SIZE_MAX;
  std::unordered_map<const Node*, size_t> index;
  for (size_t i = 0; i < l.order.size(); ++i) index[l.order[i]] = i;
  InPlaceUpdates out;
  for (const GraphOutput& o : g.outputs()) {
    if (o.role != OutputRole::ParamUpdate && o.role != OutputRole::BufferUpdate && o.role != OutputRole::OptStateUpdate)
      continue;
    const Value* in = g.findInput(o.name);
    const Node* n = o.value->producer();
    if (!in || !n || in->type() != o.value->type() || (can_write && !can_write(*n))) continue;
    auto last = last_read.find(in);
    if (last != last_read.end() && last->second == index.at(n)) out[o.value] = in;
  }
  return out;
}

InPlaceUpdates elementwiseInPlace(const Liveness& l, const std::function<bool(const Node&)>& can_overwrite) {
  InPlaceUpdates out;
  std::unordered_map<const Node*, size_t> index;
  for (size_t i = 0; i < l.order.size(); ++i) index[l.order[i]] = i;
  for (size_t i = 0; i < l.order.size(); ++i) {
    const Node& n = *l.order[i];
    const bool output0 = n.def().has(kOutput0OverInput);
    if (n.numOutputs() != 1 && !output0) continue;
    if (can_overwrite ? !can_overwrite(n) : !n.def().has(kElementwise) && !output0) continue;
    const Value* o = n.output(0);
    const BufferLife& ob = l.buffers[l.buffer_of.at(o)];
    if (ob.value != o || !ob.planned() || o->type().bytes() == 0) continue;
    // Of the inputs it may overwrite, the one whose other readers ran
    // longest ago: writing over an input orders this node after them, and a
    // reader just before it may be a sibling that could run beside it (the
    // two batch_norm_backward of a residual block read the same gradient;
    // each x was last read by a forward node).
    const Value* best = nullptr;
    size_t best_read = 0;
    for (const Value* x : n.inputs()) {
      const size_t bx = l.buffer_of.at(x);
      const BufferLife& b = l.buffers[bx];
      if (x->type() != o->type() || b.value != x || !b.planned() || b.last != i) continue;
      bool read_otherwise = false;  // through a view of x, in another layout
      for (const Value* y : n.inputs()) read_otherwise = read_otherwise || (y != x && l.buffer_of.at(y) == bx);
      if (read_otherwise) continue;
      size_t read = 0;  // one past the last other reader
      for (const Use& u : x->uses())
        if (u.user != &n) read = std::max(read, index.at(u.user) + 1);
      if (!best || read < best_read) {
        best = x;
        best_read = read;
      }
    }
    if (best) out[o] = best;
  }
  return out;
}

std::vector<uint64_t> liveBytesTimeline(const Liveness& l) {
  std::vector<uint64_t> made(l.order.size()), freed(l.order.size()), timeline(l.order.size());
  uint64_t live = 0;
  for (const BufferLife& b : l.buffers) {
    if (b.graph_input) {
      live += b.bytes;
      continue;
    }
    made[b.def] += b.bytes;
    freed[b.last] += b.bytes;
  }
  for (size_t i = 0; i < l.order.size(); ++i) {
    live += made[i];
    timeline[i] = live;
    live -= freed[i];
  }
  return timeline;
}

}  // namespace kiln
