// Buffer liveness of a graph run in node order: which buffer holds each
// value, when that buffer is created and when it is last needed. The peak
// estimate (graph_cost.h), the memory plan (passes/memory_plan.h) and the
// memory timeline of the report all read the same analysis, under the same
// target's rules (core/memory_rules.h: analyzeStepLiveness puts the pieces
// below together).
//
// Rules:
//  - a node's outputs come to life when it runs, while its inputs are still
//    live (a buffer is never reused by the node that reads it last);
//  - outputs of view nodes (by default mayAliasInput(): reshape, permute,
//    ... the views PyTorch makes) have no buffer of their own: they keep
//    their source's buffer alive until their own last use;
//  - graph inputs live for the whole step and are not the step's to place;
//    buffers the graph returns (or whose views it returns) live to the end
//    and leave the step, so they are not placed in a reusable arena either;
//  - an output nobody reads dies right after its producer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir.h"

namespace kiln {

/// One buffer: a value that owns storage, with the views that share it.
struct BufferLife {
  const Value* value = nullptr;     ///< the owner (a node output or a graph input)
  std::vector<const Value*> views;  ///< values sharing it: views, and updates written in place
  uint64_t bytes = 0;
  size_t def = 0;            ///< index in `order` of the producer (0 for graph inputs)
  size_t last = 0;           ///< index of the last node that needs it (inclusive)
  bool graph_input = false;  ///< bound by the caller; live for the whole step
  bool escapes = false;      ///< returned by the graph (itself or a view): lives past the step
  /// Whether the step may place it in a reusable arena.
  bool planned() const { return !graph_input && !escapes; }
};

struct Liveness {
  std::vector<const Node*> order;                      ///< the schedule analysed (graph order)
  std::vector<BufferLife> buffers;                     ///< graph inputs first, then node outputs in order
  std::unordered_map<const Value*, size_t> buffer_of;  ///< every value -> index into buffers
};

/// Which nodes' outputs share their first input's buffer.
using ViewPredicate = std::function<bool(const Node&)>;

/// Node outputs written into another value's buffer -> that value: an
/// optimizer update over the graph input it replaces, an elementwise result
/// over an input it is the last to read.
using InPlaceUpdates = std::unordered_map<const Value*, const Value*>;

/// Liveness of `g` run in its node order. `is_view` says which nodes make
/// views: by default mayAliasInput (PyTorch's views); an executor passes
/// what its bound kernels actually do. Outputs in `in_place` take no buffer
/// of their own: they share the input's.
Liveness analyzeLiveness(const Graph& g, const ViewPredicate& is_view = {}, const InPlaceUpdates* in_place = nullptr);

/// Updates that can be written over the graph input they replace in this
/// order: an update output (ParamUpdate, BufferUpdate, OptStateUpdate) of the
/// input's name and type whose node is the last to read that input (itself
/// or through a view), the input not being returned. `can_write` says which
/// nodes may (an executor: the bound kernel's flag); by default all. `l` is
/// the liveness without updates in place.
InPlaceUpdates inPlaceCandidates(const Graph& g, const Liveness& l,
                                 const std::function<bool(const Node&)>& can_write = {});

/// Elementwise results that can be written over an input in this order: the
/// node has one output (or the kOutput0OverInput trait: then its output 0)
/// and `can_overwrite` allows it (by default: ops with the kElementwise or
/// kOutput0OverInput trait); the input has the output's exact type, owns its
/// buffer (not a view, not a graph input, not returned), no node after this
/// one reads that buffer, and no other input of the node reads it through a
/// view (an element would be read after it was overwritten). The output must
/// not be returned either. PyTorch's in-place ops (relu_, add_) without the
/// user writing them. `l` is the liveness without any writes in place.
InPlaceUpdates elementwiseInPlace(const Liveness& l, const std::function<bool(const Node&)>& can_overwrite = {});

/// Bytes live while each node of `l.order` runs: every graph input, every
/// buffer made earlier and still needed, and the node's own outputs.
std::vector<uint64_t> liveBytesTimeline(const Liveness& l);

}  // namespace kiln
