// The channels_last pass.
//
// Needs: a target whose convolutions take channels_last (PassContext::
// cpu_only_ops: the CPU's oneDNN kernels do, in f32 and bf16; cuDNN's here
// not). Runs on the step graph after simplify and before fuse.
// Does: layout-flexible nodes (convolutions, batch and group norms,
// elementwise ops and casts, skip concatenations and their gradient's
// slices, nearest upsampling's index gathers and their gradient's
// index_add) joined by the 4-D activations they pass each other form
// regions; a region with at least two forward convolutions and no more
// activations crossing its border than it has convolution nodes is
// converted (see nodesToConvert), every node of it: f32/bf16 conv2d,
// conv2d_input_backward and conv2d_weight_backward become their
// channels_last form (core/ops/nn.cpp: activations [N, H, W, C], weights
// OIHW); a batch_norm (or its backward) normalizes the [N*H*W, C] rows of
// the NHWC tensor (the same per-channel statistics); a group_norm (or its
// backward) takes channels_last=1 (the same per-group statistics); the
// other ops run on the NHWC tensors with their dim moved with its axis.
// Each converted node reads its activations through a permute NCHW -> NHWC
// and hands its result back through the inverse. Then, to a fixed point: a
// permute of a permute is merged (simplify's permute_of_permute rule: its
// input where the two compose to the identity), which leaves transposes
// only at the regions' borders (the input image, a max pool, the global
// pooling, attention's reshapes); a sum or mean of a permute that keeps the
// remaining dims in order reduces the permute's input.
// Why: oneDNN's convolutions want their own layouts (nhwc for bf16's
// brgconv, blocked nChw16c for the f32 backward); given NCHW tensors every
// call reorders its activations in and its result out. On ResNet-50 bf16 at
// batch 8 those reorders took 183 ms of a 1.1 s step.
// Guarantees: the same values; oneDNN's NHWC kernels may sum in another
// order (float rounding), the batch-norm row sums add blocks of rows in
// another order than the per-channel runs.
#include "passes/channels_last.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/ops/op_helpers.h"
#include "passes/algebraic_rules.h"
#include "passes/dce.h"
#include "passes/fuse.h"

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;

const Ints kToNhwc = {0, 2, 3, 1};
const Ints kToNchw = {0, 3, 1, 2};

bool isPermuteBy(const Node* p, const Ints& dims) {
  return p && p->is(Op::permute) && p->is("dims") == dims;
}

bool isScalar(const Value* v) {
  return v->type().rank() == 0;
}

bool isConv(const Node& n);
std::vector<size_t> activationInputs(const Node& n);
bool hasActivationOutput(const Node& n);

/// The graph edits, with the nodes they erased this round (skipped by the
/// round's walk; cleared between rounds, as new nodes may reuse their addresses).
struct Rewriter {
  Graph& g;
  std::unordered_set<const Node*> gone;
  double convs = 0, norms = 0, group_norms = 0, moved = 0, merged = 0;

  /// permute(v, dims), reusing one that already exists before `at`
  /// (several convolutions read one activation, forward and backward).
  Value* permute(Value* v, const Ints& dims, const Node& at) {
    for (const Use& u : v->uses())
      if (isPermuteBy(u.user, dims) && !gone.count(u.user) && before(u.user, &at)) return u.user->output();
    return g.add("permute", {v}, {{"dims", dims}}, at.scope(), at.provenance());
  }

  /// Whether `a` comes before `b` in the graph (a walk: the graph changes
  /// under the pass, and it runs once per compile on a few thousand nodes).
  bool before(const Node* a, const Node* b) {
    for (const auto& n : g.nodes()) {
      if (n.get() == a) return true;
      if (n.get() == b) return false;
    }
    return false;
  }

  /// Erases `n` if nothing reads its outputs, then its inputs' producers
  /// that became unused permutes or reshapes.
  void eraseIfDead(Node* n) {
    if (!n || gone.count(n)) return;
    for (const Value* o : n->outputs())
      if (!o->uses().empty() || isReturned(o)) return;
    std::vector<Node*> producers;
    for (Value* v : n->inputs()) producers.push_back(v->producer());
    g.erase(n);
    gone.insert(n);
    for (Node* p : producers)
      if (p && (p->is(Op::permute) || p->is(Op::reshape))) eraseIfDead(p);
  }

  bool isReturned(const Value* v) const {
    for (const GraphOutput& o : g.outputs())
      if (o.value == v) return true;
    return false;
  }

  /// Replaces n's outputs by `outs` and erases n.
  void replace(Node* n, const std::vector<Value*>& outs) {
    for (size_t i = 0; i < outs.size(); ++i) g.replaceAllUsesWith(n->output(i), outs[i]);
    eraseIfDead(n);
  }

  /// A convolution or group norm (or a backward of either) in its
  /// channels_last form: its activation operands read through permutes to
  /// NHWC, its activation result handed back through the inverse.
  void convertToChannelsLast(Node* n) {
    g.setInsertPoint(n);
    AttrMap a = n->attrs();
    a["channels_last"] = int64_t{1};
    if (n->is(Op::conv2d_input_backward)) {
      const Ints& s = n->is("input_shape");
      a["input_shape"] = nhwcFromNchw(Shape(s.begin(), s.end()));
    }
    std::vector<Value*> in(n->inputs().begin(), n->inputs().end());
    for (size_t i : activationInputs(*n)) in[i] = permute(in[i], kToNhwc, *n);
    Node* m = g.create(n->op(), in, std::move(a), n->scope(), n->provenance());
    std::vector<Value*> outs(m->outputs().begin(), m->outputs().end());
    if (hasActivationOutput(*n)) outs[0] = permute(outs[0], kToNchw, *n);
    ++(isConv(*n) ? convs : group_norms);
    replace(n, outs);
  }

  /// batch_norm(x, ...) / batch_norm_backward(g, x, ...) on the NHWC rows.
  void convertNorm(Node* n) {
    g.setInsertPoint(n);
    const bool backward = n->is(Op::batch_norm_backward);
    const Shape& s = n->input(backward ? 1 : 0)->shape();
    const Shape nhwc = nhwcFromNchw(s);
    const Ints rows = {s[0] * s[2] * s[3], s[1]};
    auto toRows = [&](Value* v) {
      return g.add("reshape", {permute(v, kToNhwc, *n)}, {{"shape", rows}}, n->scope(), n->provenance());
    };
    std::vector<Value*> in(n->inputs().begin(), n->inputs().end());
    in[0] = toRows(in[0]);
    if (backward) in[1] = toRows(in[1]);
    Node* m = g.create(n->op(), in, n->attrs(), n->scope(), n->provenance());
    Value* y =
        g.add("reshape", {m->output(0)}, {{"shape", Ints(nhwc.begin(), nhwc.end())}}, n->scope(), n->provenance());
    std::vector<Value*> outs = {permute(y, kToNchw, *n)};
    for (size_t i = 1; i < m->numOutputs(); ++i) outs.push_back(m->output(i));
    replace(n, outs);
    ++norms;
  }

  /// An elementwise op, cast, cat, slice, index or index_add on the NHWC
  /// tensors (the dim of the last four moved with its axis; index tensors
  /// stay as they are, a splat `full` is made in the new shape); false when
  /// an operand is neither 4-D nor a scalar (a broadcast of lower rank,
  /// whose dims would not line up).
  bool convertElementwise(Node* n) {
    const auto rank = static_cast<int64_t>(kToNhwc.size());
    const bool indexed = n->is(Op::index) || n->is(Op::index_add);
    auto isIndex = [&](size_t i) { return indexed && i == 1; };
    if (n->output()->type().rank() != rank) return false;
    for (size_t i = 0; i < n->numInputs(); ++i)
      if (!isIndex(i) && !isScalar(n->input(i)) && n->input(i)->type().rank() != rank) return false;
    g.setInsertPoint(n);
    std::vector<Value*> in;
    for (size_t i = 0; i < n->numInputs(); ++i) {
      Value* v = n->input(i);
      const Node* p = v->producer();
      if (isIndex(i) || isScalar(v)) {
        in.push_back(v);
      } else if (p && p->is(Op::full) && p->numInputs() == 0) {
        AttrMap f = p->attrs();
        const Shape nhwc = nhwcFromNchw(v->shape());
        f["shape"] = Ints(nhwc.begin(), nhwc.end());
        in.push_back(g.add("full", {}, std::move(f), p->scope(), p->provenance()));
      } else {
        in.push_back(permute(v, kToNhwc, *n));
      }
    }
    AttrMap a = n->attrs();
    if (n->is(Op::cat) || n->is(Op::slice) || indexed) {
      int64_t d = n->i("dim");
      if (d < 0) d += rank;
      a["dim"] = kToNchw[static_cast<size_t>(d)];  // NCHW dim d is NHWC dim kToNchw[d]
    }
    Value* y = g.add(n->op(), in, std::move(a), n->scope(), n->provenance());
    replace(n, {permute(y, kToNchw, *n)});
    ++moved;
    return true;
  }

  /// permute(permute(x, a), b): simplify's permute_of_permute rule (x
  /// itself where the two compose to the identity, one permute otherwise).
  bool mergePermutes(Node* n) {
    static const AlgebraicRule* rule = [] {
      for (const AlgebraicRule& r : algebraicRules())
        if (std::string_view(r.name) == "permute_of_permute") return &r;
      return static_cast<const AlgebraicRule*>(nullptr);
    }();
    g.setInsertPoint(n);
    Value* v = rule->rewrite(g, *n);
    if (!v) return false;
    replace(n, {v});
    ++merged;
    return true;
  }

  /// sum / mean (keepdim 0) of permute(x, P) whose kept dims stay in order:
  /// the same reduction of x over the permuted dims.
  bool sinkReduction(Node* n) {
    Node* p = n->input(0)->producer();
    if (!p || !p->is(Op::permute) || n->i("keepdim") != 0) return false;
    const Ints& perm = p->is("dims");
    const auto rank = static_cast<int64_t>(perm.size());
    std::vector<int64_t> axes = reductionAxes(*n, n->is("dims"), rank);
    std::vector<bool> reduced(static_cast<size_t>(rank), false);
    for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;
    Ints dims, kept;
    for (int64_t d = 0; d < rank; ++d) (reduced[d] ? dims : kept).push_back(perm[static_cast<size_t>(d)]);
    if (!std::is_sorted(kept.begin(), kept.end())) return false;
    std::sort(dims.begin(), dims.end());
    g.setInsertPoint(n);
    AttrMap a = n->attrs();
    a["dims"] = dims;
    replace(n, {g.add(n->op(), {p->input(0)}, std::move(a), n->scope(), n->provenance())});
    return true;
  }
};

/// A convolution op to convert: 4-D, NCHW, in f32 or bf16 (what oneDNN's
/// channels_last kernels compute; the reference loops read NCHW only).
bool isConv(const Node& n) {
  if (!n.is(Op::conv2d) && !n.is(Op::conv2d_input_backward) && !n.is(Op::conv2d_weight_backward)) return false;
  const DType t = n.input(0)->dtype();
  return !channelsLast(n) && n.input(0)->type().rank() == 4 && (t == DType::F32 || t == DType::BF16);
}

/// A 4-D batch norm or group norm (or its backward) over NCHW.
bool isNorm(const Node& n) {
  const bool bn = n.is(Op::batch_norm) || n.is(Op::batch_norm_backward);
  const bool gn = n.is(Op::group_norm) || n.is(Op::group_norm_backward);
  if (!bn && !gn) return false;
  const bool forward = n.is(Op::batch_norm) || n.is(Op::group_norm);
  return n.input(forward ? 0 : 1)->type().rank() == 4 && !channelsLast(n);
}

/// Elementwise ops and casts, and the shape ops of a UNet's skip
/// connections (cat along the channels, and its gradient's slices) and
/// nearest upsampling (index gathers, and their gradient's index_add).
bool movesWithLayout(const Node& n) {
  if (n.numOutputs() == 1 && (n.is(Op::cast) || fusibleOps().count(n.kind()))) return true;
  return n.is(Op::cat) || n.is(Op::slice) || n.is(Op::index) || n.is(Op::index_add);
}

/// Ops that can run on NHWC activations once converted (or have permutes
/// move through them).
bool layoutFlexible(const Node& n) {
  return isConv(n) || isNorm(n) || movesWithLayout(n);
}

/// The activation operands of a layout-flexible node (what would be NHWC):
/// a convolution's weight is not one, nor a weight gradient.
std::vector<size_t> activationInputs(const Node& n) {
  if (n.is(Op::conv2d) || n.is(Op::conv2d_input_backward) || n.is(Op::batch_norm) || n.is(Op::group_norm))
    return {0};
  if (n.is(Op::conv2d_weight_backward) || n.is(Op::batch_norm_backward) || n.is(Op::group_norm_backward))
    return {0, 1};
  std::vector<size_t> all;
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (n.input(i)->type().rank() == 4) all.push_back(i);
  return all;
}
bool hasActivationOutput(const Node& n) {
  return !n.is(Op::conv2d_weight_backward);
}

/// The nodes to convert, in graph order. Layout-flexible nodes joined by the
/// 4-D activations they pass each other form regions; a region is
/// converted when it holds at least two forward convolutions and no more
/// activations cross its border (each a transpose once converted) than it
/// has convolution nodes (each of which stops reordering its activations
/// in and out, two to three per call). A lone convolution between
/// NCHW-only neighbours (a stem before a max pool) would trade its reorders
/// for as many transposes and gain nothing. Group norms are part of the
/// regions: with them outside, a diffusion UNet's convolutions were each
/// boxed in by transposes (its bf16 step measured 12% slower converted).
/// Every layout-flexible node of a converted region is converted, so
/// transposes are left only where activations cross its border.
std::vector<Node*> nodesToConvert(Graph& g) {
  std::unordered_map<const Node*, const Node*> parent;
  auto find = [&](const Node* n) {
    while (parent.at(n) != n) n = parent[n] = parent.at(parent.at(n));
    return n;
  };
  auto inRegion = [&](const Node* n) { return n && parent.count(n) > 0; };
  for (const auto& n : g.nodes())
    if (layoutFlexible(*n)) parent[n.get()] = n.get();
  for (const auto& n : g.nodes()) {
    if (!inRegion(n.get())) continue;
    for (size_t i : activationInputs(*n)) {
      const Node* p = n->input(i)->producer();
      if (inRegion(p) && hasActivationOutput(*p)) parent[find(p)] = find(n.get());
    }
  }
  std::unordered_map<const Node*, int> forward_convs, convs, border;
  std::unordered_map<const Node*, std::unordered_set<const Value*>> incoming;
  std::unordered_set<const Value*> outs;
  for (const GraphOutput& o : g.outputs()) outs.insert(o.value);
  for (const auto& n : g.nodes()) {
    if (!inRegion(n.get())) continue;
    const Node* root = find(n.get());
    if (isConv(*n)) ++convs[root], forward_convs[root] += n->is(Op::conv2d);
    // An activation coming in from outside the region (one transpose however many read it).
    for (size_t i : activationInputs(*n)) {
      const Node* p = n->input(i)->producer();
      if (!inRegion(p) || !hasActivationOutput(*p) || find(p) != root) incoming[root].insert(n->input(i));
    }
    // An activation leaving it: read by a node outside, or returned.
    if (!hasActivationOutput(*n)) continue;
    const Value* y = n->output(0);
    bool leaves = outs.count(y) > 0;
    for (const Use& u : y->uses()) {
      const auto ins = inRegion(u.user) ? activationInputs(*u.user) : std::vector<size_t>{};
      leaves |= !inRegion(u.user) || find(u.user) != root || std::find(ins.begin(), ins.end(), u.index) == ins.end();
    }
    border[root] += leaves;
  }
  std::vector<Node*> out;
  for (const auto& n : g.nodes()) {
    if (!inRegion(n.get())) continue;
    const Node* root = find(n.get());
    const int crossing = border[root] + static_cast<int>(incoming[root].size());
    if (forward_convs[root] >= 2 && crossing <= convs[root]) out.push_back(n.get());
  }
  return out;
}

}  // namespace

Result<PassResult> runChannelsLast(Graph& g, PassContext& ctx) {
  PassResult res;
  if (!ctx.cpu_only_ops) return res;
  Rewriter r{g};
  const std::vector<Node*> nodes = nodesToConvert(g);
  if (nodes.empty()) return res;
  for (Node* n : nodes) {
    if (n->is(Op::batch_norm) || n->is(Op::batch_norm_backward))
      r.convertNorm(n);
    else if (isConv(*n) || isNorm(*n))  // convolutions and group norms
      r.convertToChannelsLast(n);
    else
      r.convertElementwise(n);
  }
  for (bool changed = true; changed;) {
    changed = false;
    r.gone.clear();  // the addresses of nodes erased last round may hold new nodes now
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      if (r.gone.count(n)) continue;
      if (n->is(Op::permute)) {
        changed |= r.mergePermutes(n);
      } else if (n->is(Op::sum) || n->is(Op::mean)) {
        changed |= r.sinkReduction(n);
      }
    }
  }
  g.setInsertPoint(nullptr);
  auto d = runDce(g, ctx);
  if (!d) return d.error();
  double transposes = 0;
  for (const auto& n : g.nodes()) transposes += isPermuteBy(n.get(), kToNhwc) || isPermuteBy(n.get(), kToNchw);
  res.changed = true;
  res.statistics = {
      {"convolutions", r.convs},      {"batch_norms", r.norms},     {"group_norms", r.group_norms},
      {"elementwise_moved", r.moved}, {"transposes", transposes}, {"permutes_merged", r.merged}};
  return res;
}

}  // namespace kiln
