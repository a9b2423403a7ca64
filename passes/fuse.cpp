// fuse: chains of elementwise ops -> one fused_elementwise node each.
//
// What it does: walks the graph in order and grows groups of fusible
// elementwise nodes (fusibleOps()) that share one loop shape and one
// compute class: f64, or float for f32 and amp's bf16 together (a body
// computes in float and rounds every bf16 value to bf16 as the one-op
// kernels round their outputs, on the CPU and in the CUDA codegen alike;
// casts between f32 and bf16 fuse, as the rounding they are; a 0-dim f32
// constant beside bf16 tensors becomes a bf16 constant, as the one-op
// kernels convert it). A node joins the group of one of its
// producers when every other operand is already in the group or was
// computed before the group's first node; that keeps the graph acyclic
// when the group is placed at its first node's position. It must also sit within kMaxJoinDistance nodes of
// the group's last node, so fusing never hoists work from the backward into
// the forward. Operands from outside must have the loop shape,
// hold one element, or broadcast along one contiguous run of dims (a bias
// [C] on [N, T, C], a mask [T, T] on [B, H, T, T], a [C, 1, 1] scale on
// NCHW; core/tensor_type.h broadcastRunInner), which a flat index reaches
// with one division and one modulo. One-element `full` constants are copied
// into the body rather than passed in. Each group of two or more nodes
// becomes a fused_elementwise node (core/ops/fused.cpp) whose body is the
// group as text IR; values that something outside the group reads (or the
// graph returns) become its outputs, everything else never reaches memory.
//
// A float sum or mean of a group value (softmax's and layer norm's backward
// sums, bias gradients, the loss's mean) ends that group's loop, when it
// sits within kMaxJoinDistance: the group becomes a fused_reduction whose
// output 0 is the reduction; the reduced value is written only if something
// else reads it. One reduction per group; a lone elementwise node and its
// reduction fuse too.
//
// First, GEMM epilogues: a relu whose input is a linear's only use moves
// into the linear (activation="relu"), applied by the GEMM kernel in one
// chunked pass over its output; on the CPU, so does a residual add that is
// the linear's only reader (a transformer's x + proj(attention) and
// x + mlp(x): linear(..., r) {residual=1}). And on the CPU, amp's f32 copy of
// bf16/f16 logits folds into the cross-entropy that reads it: the loss
// reads the logits widened (cross_entropy {dtype=f32}) and its backward
// writes the low-precision gradient the cast after it wrote (GPT-2's
// [1024, 32000] logits: 128 MB of f32 copy written and read twice, and as
// much again for the gradient); and amp's f32 copy of a bf16 gradient folds
// into the AdamW update that reads it (adam_update widens it itself).
//
// Needs: a verified graph; run it last, after autodiff (fused nodes have no
// gradient rule) and after simplify (so rules see the plain ops).
// Guarantees: the same results bit for bit — a body runs the same per-element
// functors as the one-op kernels, in the same order, in the same dtype; bool
// intermediates (comparisons feeding `where`) stay exact as 0/1; a fused
// reduction combines the same elements in the same order as the one-op one
// (backend/cpu/reduce_loops.h).
#include "passes/fuse.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/text_ir.h"

namespace kiln {

const std::set<Op>& fusibleOps() {
  static const std::set<Op> ops = {
      // arithmetic and selection
      Op::add, Op::sub, Op::mul, Op::div, Op::neg, Op::where,
      // comparisons (their bool results feed `where`, e.g. relu's backward)
      Op::lt, Op::le, Op::gt, Op::ge, Op::eq, Op::ne,
      // activations and math
      Op::relu, Op::gelu, Op::tanh, Op::sigmoid, Op::silu, Op::exp, Op::log, Op::sqrt, Op::rsqrt, Op::abs,
      Op::erf, Op::leaky_relu, Op::hardtanh, Op::clamp, Op::hardswish, Op::hardsigmoid, Op::reciprocal,
      // the backward's elementwise gradients (gelu's, tanh's, ...)
      Op::unary_backward,
      // between f32 and bf16 (amp's casts around a softmax or a norm)
      Op::cast};
  return ops;
}

namespace {

bool isFloatType(DType t) { return t == DType::F32 || t == DType::F64; }

/// The dtypes a body may compute in (the CPU's fused kernels and the CUDA
/// codegen run all three; bf16 bodies round each value as the one-op
/// kernels do).
bool isBodyType(DType t) {
  return isFloatType(t) || t == DType::BF16;
}

/// A one-element `full` constant: copied into every body that reads it
/// instead of becoming an operand, so it never orders a group.
bool scalarConstant(const Value* v) {
  return v->producer() && v->producer()->is(Op::full) && v->type().numel() == 1 && isBodyType(v->dtype());
}

/// What a body computes a dtype's values in: f32 and bf16 in float (a bf16
/// value rounded where the one-op kernel stores it), f64 in double. One
/// group, one class: casts between f32 and bf16 fuse, to f64 they do not.
DType computeClass(DType t) {
  return t == DType::BF16 ? DType::F32 : t;
}

/// A 0-dim f32 constant read by a bf16 node: the one-op kernels convert it to
/// bf16 first (a 0-dim operand does not promote the dtype), so its body copy
/// is a bf16 constant. A one-element tensor of rank 1 or more promotes: not one.
bool convertedConstant(const Value* v, DType t) {
  return t == DType::BF16 && v->dtype() == DType::F32 && v->type().rank() == 0 && scalarConstant(v);
}

/// The dtype a node computes in when it may be fused, or nullopt.
std::optional<DType> fusibleDType(const Node& n) {
  if (n.numOutputs() != 1 || !fusibleOps().count(n.kind())) return std::nullopt;
  const DType out = n.output()->dtype();
  if (n.is(Op::cast)) {  // f32 <-> bf16: the rounding the one-op cast makes
    const DType in = n.input(0)->dtype();
    if (!isBodyType(in) || !isBodyType(out) || computeClass(in) != computeClass(out)) return std::nullopt;
    return in;
  }
  const bool where = n.is(Op::where);
  if (where && n.input(0)->dtype() != DType::Bool) return std::nullopt;
  const size_t first = where ? 1 : 0;  // where's condition is read as 0/1
  // The computing dtype: where's output's, else its operands' (no promotion
  // inside a body), where a 0-dim f32 constant may stand beside bf16.
  DType t = where ? out : n.input(0)->dtype();
  if (!where)
    for (size_t k = 0; k < n.numInputs(); ++k)
      if (!convertedConstant(n.input(k), DType::BF16)) {
        t = n.input(k)->dtype();
        break;
      }
  for (size_t k = first; k < n.numInputs(); ++k)
    if (n.input(k)->dtype() != t && !convertedConstant(n.input(k), t)) return std::nullopt;
  if (!isBodyType(t)) return std::nullopt;
  if (out != t && out != DType::Bool) return std::nullopt;
  return t;
}

/// How far after a group's last node a node may still join it. Joining
/// moves the node's work up to where the group starts and keeps its result
/// alive from there: for relu's backward mask that would be from the forward
/// to the backward, longer than the values it saves. Chains that share data
/// in cache sit next to each other.
constexpr size_t kMaxJoinDistance = 16;

struct Group {
  std::vector<Node*> nodes;
  size_t first = 0;  ///< position of nodes[0] in the graph
  size_t last = 0;   ///< position of the last node that joined
  Shape shape;
  DType dtype;                ///< computeClass of every node's dtype
  Node* reduction = nullptr;  ///< a sum or mean of a group value that ends the loop
};

/// A sum or mean the fused kernels can end a loop with (reduce_loops.h),
/// computing in the dtype it returns.
bool isFusibleReduction(const Node& n) {
  return (n.is(Op::sum) || n.is(Op::mean)) && isFloatType(n.input(0)->dtype()) &&
         n.output()->dtype() == n.input(0)->dtype();
}

/// The values the graph returns (a rewrite must keep them).
std::unordered_set<const Value*> returnedValues(const Graph& g) {
  std::unordered_set<const Value*> returned;
  for (const GraphOutput& o : g.outputs()) returned.insert(o.value);
  return returned;
}

}  // namespace

/// GEMM epilogues: relu(linear(...)) -> linear {activation="relu"} when the
/// relu is the linear's only reader (the pre-activation is not needed
/// elsewhere, e.g. by a backward). Returns how many were fused.
size_t fuseEpilogues(Graph& g) {
  std::vector<Node*> relus;
  for (const auto& n : g.nodes())
    if (n->is(Op::relu)) relus.push_back(n.get());
  const std::unordered_set<const Value*> returned = returnedValues(g);
  size_t fused = 0;
  for (Node* r : relus) {
    Node* lin = r->input(0)->producer();
    if (!lin || !lin->is(Op::linear) || lin->s("activation") != "none") continue;
    if (lin->output()->uses().size() != 1 || returned.count(lin->output())) continue;
    if (lin->output()->type() != r->output()->type()) continue;
    lin->setAttr("activation", std::string("relu"));
    g.replaceAllUsesWith(r->output(), lin->output());
    g.erase(r);
    ++fused;
  }
  return fused;
}

/// Residual epilogues (CPU kernels only; backend/cpu/kernels_linalg*.cpp):
///   add(linear(x, W, b), r) -> linear(x, W, b, r) {residual=1}
/// when the add is the linear's only reader and r has the add's type: the
/// linear's own dtype, or f32 for a bf16/f16 linear (amp's f32 residual
/// stream). The kernel adds r to the GEMM's output chunk by chunk, with
/// the separate add's arithmetic (the GEMM's result rounded to the linear's
/// dtype first), so results are the same bits. The new linear takes the
/// add's place, after r is computed. Returns how many were fused. (Measured
/// on GPT-2-width shapes: up to 4% off the linear + add pair, never slower.)
size_t fuseResidualEpilogues(Graph& g) {
  std::vector<Node*> adds;
  for (const auto& n : g.nodes())
    if (n->is(Op::add) && n->numInputs() == 2) adds.push_back(n.get());
  const std::unordered_set<const Value*> returned = returnedValues(g);
  size_t fused = 0;
  for (Node* add : adds) {
    for (size_t side = 0; side < 2; ++side) {
      Value* y = add->input(side);
      Value* r = add->input(1 - side);
      Node* lin = y->producer();
      if (!lin || !lin->is(Op::linear) || lin->i("residual") != 0) continue;
      if (y->uses().size() != 1 || returned.count(y) || y == r) continue;
      const TensorType& out = add->output()->type();
      if (r->type() != out || y->shape() != out.shape) continue;
      if (!(y->dtype() == out.dtype || (out.dtype == DType::F32 && isLowPrecisionFloat(y->dtype())))) continue;
      std::vector<Value*> inputs(lin->inputs().begin(), lin->inputs().end());
      inputs.push_back(r);
      AttrMap attrs = lin->attrs();
      attrs["residual"] = int64_t{1};
      g.setInsertPoint(add);
      Node* fusedLin = g.create("linear", std::move(inputs), std::move(attrs), lin->scope(), lin->provenance());
      g.setInsertPoint(nullptr);
      g.replaceAllUsesWith(add->output(), fusedLin->output());
      g.erase(add);
      g.erase(lin);
      ++fused;
      break;
    }
  }
  return fused;
}

/// The f32 copy amp makes of bf16/f16 logits: `v` = cast(x) {dtype=f32}.
Node* widenedLogits(const Value* v) {
  Node* c = v->producer();
  if (!c || !c->is(Op::cast) || v->dtype() != DType::F32) return nullptr;
  return isLowPrecisionFloat(c->input(0)->dtype()) ? c : nullptr;
}

/// Loss casts (CPU kernels only; backend/cpu/kernels_loss*.cpp):
///   cross_entropy(cast(x) {f32}) -> cross_entropy(x) {dtype=f32}
///   cast(cross_entropy_backward(g, cast(x) {f32}, t)) {x's dtype}
///     -> cross_entropy_backward(g, x, t)  (computes in g's f32, rounds once)
/// Both give the same bits: widening is exact, and the backward rounds its
/// f32 results to bf16/f16 as the cast did. Returns how many were folded.
size_t foldLossCasts(Graph& g) {
  const std::unordered_set<const Value*> returned = returnedValues(g);
  std::vector<Node*> losses, backwards;
  for (const auto& n : g.nodes()) {
    if (n->is(Op::cross_entropy) && !n->hasAttr("dtype")) losses.push_back(n.get());
    if (n->is(Op::cross_entropy_backward) && n->input(0)->dtype() == DType::F32) backwards.push_back(n.get());
  }
  size_t folded = 0;
  std::vector<Node*> casts;
  for (Node* n : losses)
    if (Node* c = widenedLogits(n->input(0))) {
      n->replaceInput(0, c->input(0));
      n->setAttr("dtype", DType::F32);
      casts.push_back(c);
      ++folded;
    }
  for (Node* b : backwards) {
    Node* c = widenedLogits(b->input(1));
    if (!c || b->output()->uses().size() != 1 || returned.count(b->output())) continue;
    Node* back = b->output()->uses()[0].user;
    const DType low = c->input(0)->dtype();
    if (!back->is(Op::cast) || back->output()->dtype() != low) continue;
    b->replaceInput(1, c->input(0));
    b->output()->setType({low, b->output()->shape()});
    g.replaceAllUsesWith(back->output(), b->output());
    g.erase(back);
    casts.push_back(c);
    ++folded;
  }
  std::sort(casts.begin(), casts.end());  // the loss and its backward share one cast
  casts.erase(std::unique(casts.begin(), casts.end()), casts.end());
  for (Node* c : casts)
    if (c->output()->uses().empty() && !returned.count(c->output())) g.erase(c);
  return folded;
}

/// Gradient casts (CPU kernels only; backend/cpu/kernels_optim.cpp):
///   adam_update(.., p, cast(g) {f32}, m, v, ..) -> adam_update(.., p, g, m, v, ..)
/// for amp's bf16 gradient g of an f32 parameter p when the update is the
/// cast's only reader: the kernel widens g as the cast did (exactly), so the
/// same bits, without the f32 copy written and read back (GPT-2-style's 42M
/// parameters: 250 MB of traffic per step). Returns how many were folded.
size_t foldGradCasts(Graph& g) {
  const std::unordered_set<const Value*> returned = returnedValues(g);
  std::vector<Node*> casts;
  for (const auto& owned : g.nodes()) {
    Node* n = owned.get();
    if (!n->is(Op::adam_update)) continue;
    for (size_t i = 3; i + 3 < n->numInputs(); i += 4) {  // lr, step, grad_scale, then (p, g, m, v) groups
      Value* grad = n->input(i + 1);
      Node* c = grad->producer();
      if (!c || !c->is(Op::cast) || grad->dtype() != DType::F32 || n->input(i)->dtype() != DType::F32) continue;
      if (c->input(0)->dtype() != DType::BF16 || grad->uses().size() != 1 || returned.count(grad)) continue;
      n->replaceInput(i + 1, c->input(0));
      casts.push_back(c);
    }
  }
  for (Node* c : casts) g.erase(c);  // each had this update as its only reader
  return casts.size();
}

Result<PassResult> runFuse(Graph& g, PassContext& ctx) {
  const size_t epilogues = fuseEpilogues(g) + (ctx.cpu_only_ops ? fuseResidualEpilogues(g) + foldLossCasts(g) : 0);
  const size_t grad_casts = ctx.cpu_only_ops ? foldGradCasts(g) : 0;
  std::vector<Node*> order;
  std::unordered_map<const Node*, size_t> pos;
  for (const auto& n : g.nodes()) {
    pos[n.get()] = order.size();
    order.push_back(n.get());
  }
  std::vector<Group> groups;
  std::unordered_map<const Node*, size_t> group_of;
  auto operandOk = [](const Value* v, const Group& gr) {
    return v->shape() == gr.shape || broadcastRunInner(v->shape(), gr.shape).has_value();
  };
  for (Node* n : order) {
    if (isFusibleReduction(*n)) {  // ends the group computing its input, if near enough
      const Node* p = n->input(0)->producer();
      if (!p || !group_of.count(p)) continue;
      Group& gr = groups[group_of[p]];
      if (!gr.reduction && gr.shape == n->input(0)->shape() && gr.dtype == n->input(0)->dtype() &&
          pos[n] - gr.last <= kMaxJoinDistance)
        gr.reduction = n;
      continue;
    }
    auto t = fusibleDType(*n);
    if (!t) continue;
    const Shape& shape = n->output()->shape();
    // Join the group of a producer, if the join keeps the graph acyclic.
    std::optional<size_t> join;
    for (const Value* v : n->inputs()) {
      const Node* p = v->producer();
      if (!p || !group_of.count(p)) continue;
      const size_t gi = group_of[p];
      const Group& gr = groups[gi];
      if (gr.shape != shape || gr.dtype != computeClass(*t) || pos[n] - gr.last > kMaxJoinDistance) continue;
      bool ok = true;
      for (const Value* w : n->inputs()) {
        const Node* q = w->producer();
        const bool inside = q && group_of.count(q) && group_of[q] == gi;
        if (inside || scalarConstant(w)) continue;
        if (!operandOk(w, gr) || (q && pos[q] >= gr.first)) ok = false;
      }
      if (ok) {
        join = gi;
        break;
      }
    }
    if (join) {
      groups[*join].nodes.push_back(n);
      groups[*join].last = pos[n];
      group_of[n] = *join;
      continue;
    }
    Group gr{{n}, pos[n], pos[n], shape, computeClass(*t)};
    bool ok = true;
    for (const Value* w : n->inputs()) ok = ok && operandOk(w, gr);
    if (!ok) continue;
    group_of[n] = groups.size();
    groups.push_back(std::move(gr));
  }

  // Which values leave their group: used by another node or returned.
  const std::unordered_set<const Value*> returned = returnedValues(g);
  size_t fused_groups = 0, fused_nodes = 0, reductions = 0;
  double bytes_saved = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& gr = groups[gi];
    Node* red = gr.reduction;
    if (gr.nodes.size() + (red ? 1 : 0) < 2) continue;
    Graph body;
    body.name = "fused";
    std::map<const Value*, Value*> inside;  // outer value -> body value
    std::vector<Value*> operands;
    auto bodyValue = [&](Value* v) -> Value* {
      auto it = inside.find(v);
      if (it != inside.end()) return it->second;
      if (scalarConstant(v)) {
        const Node* c = v->producer();
        return inside[v] = body.createWithTypes("full", {}, c->attrs(), {v->type()})->output();
      }
      Value* in = body.addInput("i" + std::to_string(operands.size()), v->type(), ValueRole::Data);
      operands.push_back(v);
      inside[v] = in;
      return in;
    };
    std::map<const Value*, Value*> converted;  // 0-dim f32 constants read as bf16
    auto bodyOperand = [&](Value* v, DType t) -> Value* {
      if (!convertedConstant(v, t)) return bodyValue(v);
      Value*& c = converted[v];
      if (!c) {
        AttrMap a = v->producer()->attrs();
        a["dtype"] = DType::BF16;
        c = body.createWithTypes("full", {}, std::move(a), {TensorType{DType::BF16, {}}})->output();
      }
      return c;
    };
    for (Node* n : gr.nodes) {
      const DType t = *fusibleDType(*n);
      std::vector<Value*> ins;
      for (Value* v : n->inputs()) ins.push_back(bodyOperand(v, t));
      Node* b = body.createWithTypes(n->op(), ins, n->attrs(), {n->output()->type()});
      inside[n->output()] = b->output();
    }
    // A reduction reads body output 0; the node's output 0 is its result.
    if (red) body.addOutput(inside.at(red->input(0)), "r");
    std::vector<Value*> leaving;
    for (Node* n : gr.nodes) {
      Value* v = n->output();
      bool escapes = returned.count(v) > 0;
      for (const Use& u : v->uses())
        if (u.user != red && (!group_of.count(u.user) || group_of[u.user] != gi)) escapes = true;
      if (escapes) {
        body.addOutput(inside[v], "o" + std::to_string(leaving.size()));
        leaving.push_back(v);
      } else {
        bytes_saved += 2.0 * static_cast<double>(v->type().bytes());
      }
    }
    AttrMap attrs;
    if (red) {
      attrs = red->attrs();  // dims, keepdim
      attrs["reduce"] = red->op();
    }
    attrs["body"] = GraphAttr{std::make_shared<const Graph>(std::move(body))};
    const size_t count = gr.nodes.size() + (red ? 1 : 0);
    g.setInsertPoint(gr.nodes.front());
    Node* f = g.create(red ? "fused_reduction" : "fused_elementwise", operands, std::move(attrs),
                       gr.nodes.front()->scope(),
                       "fuse(" + std::to_string(count) + " nodes from " + gr.nodes.front()->describe() + ")");
    g.setInsertPoint(nullptr);
    const size_t first = red ? 1 : 0;
    if (red) g.replaceAllUsesWith(red->output(), f->output(0));
    for (size_t i = 0; i < leaving.size(); ++i) g.replaceAllUsesWith(leaving[i], f->output(first + i));
    std::vector<Value*> constants;  // copied into the body; gone if nothing else reads them
    for (const auto& [outer, in_body] : inside)
      if (scalarConstant(outer)) constants.push_back(const_cast<Value*>(outer));
    for (const auto& [outer, in_body] : converted)
      if (!inside.count(outer)) constants.push_back(const_cast<Value*>(outer));
    if (red) g.erase(red);
    for (auto it = gr.nodes.rbegin(); it != gr.nodes.rend(); ++it) g.erase(*it);
    for (Value* c : constants)
      if (c->uses().empty() && !returned.count(c)) g.erase(c->producer());
    ++fused_groups;
    fused_nodes += count;
    reductions += red ? 1 : 0;
  }
  return PassResult{fused_groups > 0 || epilogues > 0 || grad_casts > 0,
                    {{"groups", static_cast<double>(fused_groups)},
                     {"epilogues", static_cast<double>(epilogues)},
                     {"grad_casts", static_cast<double>(grad_casts)},
                     {"nodes_fused", static_cast<double>(fused_nodes)},
                     {"reductions", static_cast<double>(reductions)},
                     {"bytes_saved", bytes_saved}}};
}

}  // namespace kiln
