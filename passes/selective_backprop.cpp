// selective_backprop: forward on the whole batch, backward on its k
// highest-loss examples (Jiang et al. 2019; Composer's SelectiveBackprop),
// with a static k inside one step graph.
//
// Needs: the loss pass has run on the forward traced at k rows (Data inputs
// input0.. and target of k rows), and ctx.training.selective.scoring holds
// the same model's forward traced at N rows (the driver imports the model
// twice: static shapes, and traced reshapes name their batch size). Does:
// builds the graph anew, inputs in the old order with every Data input at N
// rows; first the scoring forward on them (scope "scoring.<its scope>"), each
// example's loss under the training loss's rule (cross_entropy with its
// label smoothing and ignored class, or mse), averaged over the example's
// other dims, a topk of k, and `index` along dim 0 of every Data input
// (target included) with those indices; then the training graph on the
// selected rows. The scoring forward's BufferUpdate and other outputs are
// dropped: running statistics follow the examples trained on.
// Guarantees: the batch the step takes has N rows; the Loss and Metric
// outputs are the k examples'; no gradient can flow into the scoring
// forward (topk's result is integer), so autodiff's backward is k rows
// wide.
#include "passes/selective_backprop.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace kiln {
namespace {

constexpr const char* kScope = "selective_backprop";

using ValueMap = std::unordered_map<const Value*, Value*>;

/// Copy every node of `from` into `to` (inputs through `map`, which gains
/// the outputs), with `scope_prefix` before each scope.
void copyNodes(const Graph& from, Graph& to, ValueMap& map, const std::string& scope_prefix) {
  for (const auto& n : from.nodes()) {
    std::vector<Value*> ins;
    for (Value* v : n->inputs()) ins.push_back(map.at(v));
    std::vector<TensorType> types;
    for (Value* v : n->outputs()) types.push_back(v->type());
    const std::string scope = scope_prefix.empty() ? n->scope()
                              : n->scope().empty() ? scope_prefix
                                                   : scope_prefix + "." + n->scope();
    Node* c = to.createWithTypes(n->op(), std::move(ins), n->attrs(), std::move(types), scope, n->provenance());
    for (size_t i = 0; i < n->numOutputs(); ++i) map[n->output(i)] = c->output(i);
  }
}

Shape withRows(Shape s, int64_t rows) {
  if (!s.empty()) s[0] = rows;
  return s;
}

/// The mean over every dim but the first: [N, ...] -> [N].
Value* perExample(Graph& g, Value* v) {
  if (v->type().rank() <= 1) return v;
  std::vector<int64_t> dims(static_cast<size_t>(v->type().rank() - 1));
  std::iota(dims.begin(), dims.end(), 1);
  return g.add("mean", {v}, {{"dims", dims}}, kScope);
}

/// Each example's training loss, [N].
Value* exampleLosses(Graph& g, Value* pred, Value* target, const TrainingOptions& opt) {
  if (opt.loss == LossKind::Mse) {
    Value* d = g.add("sub", {pred, target}, {}, kScope);
    return perExample(g, g.add("mul", {d, d}, {}, kScope));
  }
  if (opt.loss != LossKind::CrossEntropy)
    fail("selective_backprop: scores examples with cross_entropy or mse losses, not " +
         std::string(lossKindName(opt.loss)));
  const CrossEntropyOptions& ce = opt.cross_entropy;
  if (!ce.class_weights.empty()) fail("selective_backprop: class weights are not supported");
  AttrMap attrs{{"reduction", std::string("none")}};
  if (ce.ignore_index != -100) attrs["ignore_index"] = ce.ignore_index;
  if (ce.label_smoothing != 0) attrs["label_smoothing"] = ce.label_smoothing;
  const Shape& ps = pred->shape();
  const Shape& ts = target->shape();
  Shape without1 = ps;
  if (ps.size() >= 2) without1.erase(without1.begin() + 1);
  if (ps.size() >= 2 && ts == without1) return perExample(g, g.add("cross_entropy", {pred, target}, attrs, kScope));
  // Classes last ([N, T, V] logits, [N, T] targets): as rows of V.
  const int64_t classes = ps.back();
  Value* rows = g.add("reshape", {pred}, {{"shape", std::vector<int64_t>{-1, classes}}}, kScope);
  Value* flat = g.add("reshape", {target}, {{"shape", std::vector<int64_t>{-1}}}, kScope);
  Value* each = g.add("cross_entropy", {rows, flat}, attrs, kScope);
  return perExample(g, g.add("reshape", {each}, {{"shape", std::vector<int64_t>(ts.begin(), ts.end())}}, kScope));
}

}  // namespace

Result<PassResult> runSelectiveBackprop(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    const SelectiveBackpropOptions& sb = ctx.training.selective;
    if (sb.fraction == 0) return {};
    if (!sb.scoring) fail("selective_backprop: no scoring forward (the model at the whole batch) was given");
    const Graph& scoring = *sb.scoring;
    const Value* target = g.findInput("target");
    if (!target) fail("selective_backprop: needs the loss pass first (no target input)");
    Value* pred = nullptr;
    for (const GraphOutput& o : scoring.outputs())
      if (o.role == OutputRole::Output) {
        pred = o.value;
        break;
      }
    if (!pred) fail("selective_backprop: the scoring forward has no output");
    const Value* s0 = scoring.findInput("input0");
    const Value* k0 = g.findInput("input0");
    if (!s0 || !k0 || s0->shape().empty() || k0->shape().empty())
      fail("selective_backprop: needs a batched input0 in both forwards");
    const int64_t n = s0->shape()[0], k = k0->shape()[0];
    if (k >= n)
      fail("selective_backprop: the trained rows (" + std::to_string(k) + ") must be fewer than the batch's (" +
           std::to_string(n) + ")");

    Graph out;
    out.name = g.name;
    ValueMap train_map, score_map;
    std::vector<std::pair<Value*, Value*>> data;  // (training graph's k-row input, whole-batch input)
    for (Value* v : g.inputs()) {
      if (v->role() == ValueRole::Data) {
        Value* whole = out.addInput(v->name(), {v->dtype(), withRows(v->shape(), n)}, ValueRole::Data);
        data.emplace_back(v, whole);
        continue;
      }
      train_map[v] = out.addInput(v->name(), v->type(), v->role());
    }
    for (Value* v : scoring.inputs()) {
      Value* mine = out.findInput(v->name());
      if (!mine) fail("selective_backprop: the scoring forward's input '" + v->name() + "' is not the step's");
      if (mine->type() != v->type())
        fail("selective_backprop: '" + v->name() + "' is " + v->type().str() + " in the scoring forward, " +
             mine->type().str() + " in the step");
      score_map[v] = mine;
    }
    out.setInsertPoint(nullptr);
    copyNodes(scoring, out, score_map, "scoring");
    Value* losses = exampleLosses(out, score_map.at(pred), out.findInput("target"), ctx.training);
    Value* keep = out.add("topk", {losses}, {{"k", k}, {"dim", int64_t{0}}}, kScope);
    for (auto& [small, whole] : data) train_map[small] = out.add("index", {whole, keep}, {{"dim", int64_t{0}}}, kScope);
    copyNodes(g, out, train_map, "");
    for (const GraphOutput& o : g.outputs()) out.addOutput(train_map.at(o.value), o.name, o.role);
    g = std::move(out);
    PassResult r;
    r.changed = true;
    r.statistics["examples_scored"] = static_cast<double>(n);
    r.statistics["examples_trained"] = static_cast<double>(k);
    return r;
  });
}

}  // namespace kiln
