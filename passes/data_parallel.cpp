// data_parallel: gradient buckets, their allreduce, and the averaged loss.
//
// Needs: autodiff has run (Gradient outputs named like their parameters),
// the optimizer has not (it consumes the gradients this pass reduces);
// ctx.training.data_parallel.world_size ranks will run the same graph, each
// on its own slice of the batch.
// Does: see data_parallel.h. Buckets follow the order of the gradients'
// producers in the graph (autodiff emits the backward from the loss down,
// so the last layer's gradients come first, as in DDP's reversed parameter
// order); a bucket closes once it holds bucket_bytes, so one larger than
// that holds a single gradient. Each allreduce sits right after its last
// producer; the schedule pass later keeps it as early as its inputs allow.
// Guarantees: each Gradient output is the mean over ranks of the ranks'
// gradients (every rank the same bits); frozen parameters' gradients are not
// communicated (the freeze pass drops them next); with one rank, nothing
// changes. Under ZeRO-1 only this rank's parameters keep a Gradient output
// (the same mean), and ctx.zero_plan names every parameter's owner.
#include "passes/data_parallel.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "passes/freeze.h"

namespace kiln {
namespace {

constexpr const char* kScope = "data_parallel";
constexpr int64_t kDefaultSparseBlock = 256;

struct Grad {
  size_t output;  ///< index in g.outputs()
  Value* value;
  size_t position;  ///< its producer's index in the node list (0: a graph input)
  bool sparse = false;
  int owner = 0;  ///< ZeRO-1: the rank that updates this parameter
};

/// Elements per sparse block: one row of a matrix (an embedding row), else a fixed size.
int64_t sparseBlock(const Value* v) {
  const Shape& s = v->shape();
  return s.size() >= 2 && s.back() > 0 ? s.back() : kDefaultSparseBlock;
}

/// An embedding gradient worth exchanging sparsely: embedding_backward's,
/// of a table with more rows than the ranks' indices together can touch.
/// In a smaller one (a position embedding) every row may well be touched:
/// it rides in a dense bucket instead of paying for exchanges of its own.
bool sparseEmbedding(const Value* grad, int world_size) {
  const Node* p = grad->producer();
  if (!p || !p->is(Op::embedding_backward) || grad->shape().empty()) return false;
  return static_cast<double>(world_size) * static_cast<double>(p->input(1)->type().numel()) <
         static_cast<double>(grad->shape()[0]);
}

/// An embedding gradient that can stay row-sparse: embedding_backward's
/// (without scale_grad_by_freq) of an f32/f64 table.
bool rowSparseEmbedding(const Value* grad) {
  const Node* p = grad->producer();
  return p && p->is(Op::embedding_backward) && !p->i("scale_grad_by_freq") &&
         (grad->dtype() == DType::F32 || grad->dtype() == DType::F64) && grad->shape().size() == 2;
}

/// Replace an embedding gradient's embedding_backward and sparse allreduce by
/// the row-sparse chain, right after the embedding_backward it replaces:
/// rows, their allreduce, and (when this rank updates the parameter,
/// `dense`) the dense gradient for the readers that want one
/// (sparse_updates gives SGD the rows instead). Returns that gradient.
Value* rowSparseAllreduce(Graph& g, const std::unordered_map<const Node*, size_t>& position,
                          const std::vector<Node*>& order, const Value* grad, int64_t bucket, int world_size,
                          bool dense) {
  Node* eb = grad->producer();
  const size_t at = position.at(eb);
  const int64_t rows = grad->shape()[0];
  g.setInsertPoint(at + 1 < order.size() ? order[at + 1] : nullptr);
  Node* er = g.create("embedding_backward_rows", {eb->input(0), eb->input(1)},
                      {{"num_weights", rows}, {"padding_idx", eb->i("padding_idx")}}, eb->scope(), eb->provenance());
  Node* ar = g.create("allreduce_rows", {er->output(0), er->output(1)},
                      {{"bucket", bucket},
                       {"average", int64_t{1}},
                       {"num_rows", rows},
                       {"world_size", static_cast<int64_t>(world_size)}},
                      kScope);
  Value* out = dense ? g.add("rows_to_dense", {ar->output(0), ar->output(1)}, {{"num_rows", rows}}, kScope) : nullptr;
  g.setInsertPoint(nullptr);
  return out;
}

/// Insert `op` over `ins` right after the latest of their producers; point
/// the graph outputs `outs` (indices) at its results.
Node* insertAfterProducers(Graph& g, const std::unordered_map<const Node*, size_t>& position,
                           const std::vector<Node*>& order, const std::string& op, std::vector<Value*> ins,
                           AttrMap attrs) {
  size_t last = 0;
  bool any = false;
  for (const Value* v : ins)
    if (v->producer()) {
      last = std::max(last, position.at(v->producer()));
      any = true;
    }
  g.setInsertPoint(!any ? order.front() : last + 1 < order.size() ? order[last + 1] : nullptr);
  Node* n = g.create(op, std::move(ins), std::move(attrs), kScope);
  g.setInsertPoint(nullptr);
  return n;
}

}  // namespace

std::vector<int> zeroOwners(const std::vector<int64_t>& numels, int world_size) {
  std::vector<size_t> order(numels.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(static_cast<size_t>(std::max(world_size, 1)), 0);
  std::vector<int> owners(numels.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of the least loaded
    owners[i] = static_cast<int>(least - load.begin());
    *least += numels[i];
  }
  return owners;
}

Result<PassResult> runDataParallel(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    const DataParallelOptions& dp = ctx.training.data_parallel;
    if (dp.world_size <= 1) return PassResult{};
    if (std::ranges::none_of(g.outputs(), [](const GraphOutput& o) { return o.role == OutputRole::Gradient; }))
      fail("data_parallel: the graph has no Gradient outputs (run it after autodiff, before the optimizer)");
    std::vector<Node*> order;
    std::unordered_map<const Node*, size_t> position;
    for (const auto& n : g.nodes()) {
      position[n.get()] = order.size();
      order.push_back(n.get());
    }

    std::vector<Grad> grads;
    std::vector<bool> pattern_used(dp.sparse_patterns.size(), false);
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const GraphOutput& o = g.outputs()[i];
      if (o.role != OutputRole::Gradient || ctx.training.frozen.count(o.name)) continue;
      Grad gr{i, o.value, o.value->producer() ? position.at(o.value->producer()) + 1 : 0};
      gr.sparse = dp.sparse_embeddings && sparseEmbedding(o.value, dp.world_size);
      for (size_t k = 0; k < dp.sparse_patterns.size(); ++k)
        if (freezePatternMatches(dp.sparse_patterns[k], o.name)) {
          gr.sparse = true;
          pattern_used[k] = true;
        }
      if (gr.sparse && (!isFloating(o.value->dtype()) || o.value->type().numel() == 0)) gr.sparse = false;
      grads.push_back(gr);
    }
    for (size_t k = 0; k < dp.sparse_patterns.size(); ++k)
      if (!pattern_used[k])
        fail("--sparse-grads " + dp.sparse_patterns[k] + ": selects no trained parameter's gradient");
    const bool zero = dp.zero_stage == 1;
    if (dp.zero_stage != 0 && !zero) fail("data_parallel: ZeRO stage " + std::to_string(dp.zero_stage) + " (0 or 1)");
    if (zero && (dp.rank < 0 || dp.rank >= dp.world_size))
      fail("data_parallel: rank " + std::to_string(dp.rank) + " is not in 0.." + std::to_string(dp.world_size - 1));
    if (zero) {  // partitioned in parameter order, as ZeroRedundancyOptimizer does
      std::vector<int64_t> numels;
      for (const Grad& gr : grads) numels.push_back(gr.value->type().numel());
      const std::vector<int> owners = zeroOwners(numels, dp.world_size);
      for (size_t k = 0; k < grads.size(); ++k) grads[k].owner = owners[k];
    }
    std::stable_sort(grads.begin(), grads.end(), [](const Grad& a, const Grad& b) { return a.position < b.position; });

    // Buckets in production order; a sparse gradient is a bucket of its own.
    std::vector<std::vector<const Grad*>> buckets;
    std::vector<bool> bucket_sparse;
    uint64_t open_bytes = 0;
    size_t dense_buckets = 0, open = SIZE_MAX;  // open: the dense bucket being filled (sparse ones may follow it)
    for (const Grad& gr : grads) {
      if (gr.sparse) {
        buckets.push_back({&gr});
        bucket_sparse.push_back(true);
        continue;
      }
      // The first bucket closes early, as DDP's rebuilt buckets do (1 MiB):
      // the last layers' gradients start on the wire while the backward of
      // the rest runs, instead of waiting for 25 MiB of them.
      const uint64_t cap = dense_buckets == 1 ? std::min(dp.first_bucket_bytes, dp.bucket_bytes) : dp.bucket_bytes;
      if (open == SIZE_MAX || open_bytes >= cap) {
        buckets.emplace_back();
        bucket_sparse.push_back(false);
        open = buckets.size() - 1;
        ++dense_buckets;
        open_bytes = 0;
      }
      buckets[open].push_back(&gr);
      open_bytes += gr.value->type().bytes();
    }

    auto& outs = g.mutableOutputs();
    uint64_t grad_bytes = 0;
    int64_t sparse_count = 0;
    std::vector<size_t> not_owned;  // ZeRO-1: Gradient outputs another rank updates
    std::vector<Node*> replaced;    // embedding_backward nodes the row-sparse chain replaced
    if (zero) ctx.zero_plan.emplace();
    for (size_t b = 0; b < buckets.size(); ++b) {
      std::vector<Value*> ins;
      std::vector<int64_t> owners;
      for (const Grad* gr : buckets[b]) {
        ins.push_back(gr->value);
        owners.push_back(gr->owner);
        grad_bytes += gr->value->type().bytes();
        if (zero) ctx.zero_plan->owners.emplace_back(outs[gr->output].name, gr->owner);
      }
      if (bucket_sparse[b] && dp.row_sparse_embeddings && rowSparseEmbedding(ins[0])) {
        ++sparse_count;
        replaced.push_back(ins[0]->producer());
        const Grad& gr = *buckets[b][0];
        const bool owned = !zero || gr.owner == dp.rank;
        Value* dense = rowSparseAllreduce(g, position, order, ins[0], static_cast<int64_t>(b), dp.world_size, owned);
        if (owned)
          outs[gr.output].value = dense;
        else
          not_owned.push_back(gr.output);
        continue;
      }
      AttrMap attrs = {{"bucket", static_cast<int64_t>(b)}, {"average", int64_t{1}}};
      if (bucket_sparse[b]) {
        attrs["sparse"] = int64_t{1};
        attrs["block"] = sparseBlock(ins[0]);
        ++sparse_count;
      }
      // ZeRO-1 reduces a dense bucket only to the owners; a sparse gradient
      // keeps its allreduce (its exchange is already about the rows sent).
      const bool scatter = zero && !bucket_sparse[b];
      if (scatter) {
        attrs["rank"] = static_cast<int64_t>(dp.rank);
        attrs["owners"] = owners;
      }
      Node* n =
          insertAfterProducers(g, position, order, scatter ? "reduce_scatter" : "allreduce", ins, std::move(attrs));
      size_t next_out = 0;
      for (size_t k = 0; k < buckets[b].size(); ++k) {
        const Grad& gr = *buckets[b][k];
        if (zero && gr.owner != dp.rank) {
          not_owned.push_back(gr.output);
          continue;
        }
        outs[gr.output].value = n->output(scatter ? next_out++ : k);
      }
    }
    std::sort(not_owned.begin(), not_owned.end());
    for (size_t k = not_owned.size(); k-- > 0;) outs.erase(outs.begin() + static_cast<std::ptrdiff_t>(not_owned[k]));

    // What the step reports: the mean over ranks of the loss and accuracy.
    std::vector<size_t> averaged;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].role == OutputRole::Loss || (outs[i].role == OutputRole::Metric && outs[i].name == "accuracy"))
        averaged.push_back(i);
    if (!averaged.empty()) {
      std::vector<Value*> ins;
      for (size_t i : averaged) ins.push_back(outs[i].value);
      // Right after the loss: on the wire while the backward runs.
      Node* n = insertAfterProducers(g, position, order, "allreduce", ins,
                                     {{"bucket", int64_t{-1}}, {"average", int64_t{1}}});
      for (size_t k = 0; k < averaged.size(); ++k) outs[averaged[k]].value = n->output(k);
    }
    // Running statistics as rank 0 has them (DDP's broadcast_buffers).
    std::vector<size_t> buffers;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].role == OutputRole::BufferUpdate) buffers.push_back(i);
    if (!buffers.empty()) {
      std::vector<Value*> ins;
      for (size_t i : buffers) ins.push_back(outs[i].value);
      Node* n = insertAfterProducers(g, position, order, "broadcast", ins, {{"root", int64_t{0}}});
      for (size_t k = 0; k < buffers.size(); ++k) outs[buffers[k]].value = n->output(k);
    }
    // Last: `order` (insertion points above) may hold them.
    for (Node* eb : replaced)
      if (eb->output(0)->uses().empty() &&
          std::ranges::none_of(outs, [&](const GraphOutput& o) { return o.value == eb->output(0); }))
        g.erase(eb);

    PassResult r;
    r.changed = true;
    r.statistics = {{"buckets", static_cast<double>(buckets.size())},
                    {"sparse_gradients", static_cast<double>(sparse_count)},
                    {"gradient_bytes", static_cast<double>(grad_bytes)}};
    if (zero) r.statistics["owned_gradients"] = static_cast<double>(grads.size() - not_owned.size());
    return r;
  });
}

}  // namespace kiln
