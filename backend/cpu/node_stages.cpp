// Grouping of independent nodes into stages (see node_stages.h).
#include "backend/cpu/node_stages.h"

#include <algorithm>
#include <unordered_set>

#include "core/op_table.h"

namespace kiln {

double estimatedMicros(const Node& n) {
  const Cost c = nodeCost(n);
  const Op op = n.kind();
  const bool gemm = op == Op::matmul || op == Op::linear || op == Op::gemm || op == Op::conv2d ||
                    op == Op::conv2d_input_backward || op == Op::conv2d_weight_backward;
  return std::max(c.flops / (gemm ? kGemmFlopsPerMicro : kFlopsPerMicro), ioBytes(n) / kBytesPerMicro);
}

std::vector<std::pair<size_t, size_t>> groupIndependentNodes(const Liveness& l,
                                                             const std::vector<const KernelDef*>& kernels,
                                                             const std::vector<std::vector<const Value*>>& donors,
                                                             double min_beside_micros) {
  const std::vector<const Node*>& nodes = l.order;
  // The buffer a value lives in: a view's is its source's.
  auto root = [&](const Value* v) { return l.buffers[l.buffer_of.at(v)].value; };
  auto small = [&](size_t i) {
    if (!kernels[i]->runs_beside_others) return false;
    const Cost c = nodeCost(*nodes[i]);
    int64_t out_elements = 0;
    for (const Value* o : nodes[i]->outputs()) out_elements += o->type().numel();
    return c.flops <= kSmallNodeFlops && out_elements <= kSmallNodeElements;
  };

  std::vector<std::pair<size_t, size_t>> stages;
  std::unordered_set<const Node*> members;         // of the open stage
  std::unordered_set<const Value*> read, written;  // buffers (roots) it reads and writes over
  size_t first = 0;
  bool open_is_small = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    std::vector<const Value*> reads, writes;
    for (const Value* v : n.inputs()) reads.push_back(root(v));
    for (const Value* d : donors[i])
      if (d) writes.push_back(d);
    bool joins = i > first && open_is_small && small(i) && i - first < kMaxStageNodes;
    for (const Value* v : n.inputs())
      if (joins && v->producer() && members.count(v->producer())) joins = false;
    for (const Value* w : writes)
      if (joins && (read.count(w) || written.count(w))) joins = false;
    for (const Value* r : reads)
      if (joins && written.count(r)) joins = false;
    if (!joins && i > first) {
      stages.emplace_back(first, i);
      first = i;
      members.clear();
      read.clear();
      written.clear();
    }
    if (i == first) open_is_small = small(i);
    members.insert(&n);
    read.insert(reads.begin(), reads.end());
    written.insert(writes.begin(), writes.end());
  }
  if (first < nodes.size()) stages.emplace_back(first, nodes.size());
  // A stage pays for waking the pool only when two of its nodes have work
  // worth a thread each; else its nodes run one by one.
  std::vector<std::pair<size_t, size_t>> kept;
  for (const auto& [b, e] : stages) {
    int worthy = 0;
    for (size_t i = b; i < e; ++i) worthy += estimatedMicros(*nodes[i]) >= min_beside_micros;
    if (e - b > 1 && worthy >= 2) {
      kept.emplace_back(b, e);
    } else {
      for (size_t i = b; i < e; ++i) kept.emplace_back(i, i + 1);
    }
  }
  return kept;
}

}  // namespace kiln
