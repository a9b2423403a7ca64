// loss: turns a forward graph into one that ends in the training loss.
//
// Needs: an imported forward graph (first plain output = prediction).
// Does: adds the `target` Data input and the loss nodes (scope "loss"), an
// accuracy metric for classification, and replaces the plain outputs by the
// Loss output. Guarantees: exactly one Loss output, 0-d, floating; the
// forward's BufferUpdate outputs untouched. Errors name the prediction's and
// the target's types when they do not fit together.
#include "passes/loss.h"

#include "core/dtype.h"
#include "core/import/decompositions/loss.h"

namespace kiln {
namespace {

constexpr const char* kScope = "loss";

Shape withoutDim(const Shape& s, size_t d) {
  Shape r = s;
  r.erase(r.begin() + static_cast<long>(d));
  return r;
}

struct Built {
  Value* loss;
  Value* accuracy = nullptr;
};

/// The lowering context core/import/decompositions/ needs, over the graph
/// being built (nodes in the loss scope).
struct GraphCx {
  Graph& g;
  Value* emit(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {}) {
    return g.add(op, std::move(inputs), std::move(attrs), kScope);
  }
  Node* emitNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {}) {
    return emit(op, std::move(inputs), std::move(attrs))->producer();
  }
  Value* scalar(double value, DType t) {
    return emit("full", {}, {{"dtype", t}, {"shape", Shape{}}, {"value", value}});
  }
  Value* cast(Value* v, DType t) { return v->dtype() == t ? v : emit("cast", {v}, {{"dtype", t}}); }
};

Built crossEntropy(Graph& g, Value* logits, const TrainingOptions& opt) {
  const TensorType& lt = logits->type();
  if (!isFloating(lt.dtype)) fail("loss: cross_entropy needs floating logits, the model outputs " + lt.str());
  size_t rank = lt.shape.size();
  bool last_dim = false;
  TensorType target{DType::I64, rank >= 2 ? withoutDim(lt.shape, 1) : Shape{}};
  if (opt.target) {
    target = *opt.target;
    if (!isIntegral(target.dtype))
      fail("loss: cross_entropy needs integer class indices as target, got " + target.str());
    bool pytorch = rank >= 2 ? target.shape == withoutDim(lt.shape, 1) : target.shape.empty();
    bool trailing = rank >= 3 && target.shape == withoutDim(lt.shape, rank - 1);
    if (!pytorch && !trailing)
      fail("loss: target " + target.str() + " does not fit logits " + lt.str() +
           " (expected the logits' shape without the class dim: dim 1, or the last dim for [N, T, V])");
    last_dim = !pytorch;
  } else if (rank == 3) {
    last_dim = true;
    target.shape = withoutDim(lt.shape, 2);
  }
  Value* t = g.addInput("target", target, ValueRole::Data);
  Value* x = logits;
  Value* y = t;
  if (last_dim) {
    x = g.add("reshape", {logits}, {{"shape", std::vector<int64_t>{-1, lt.shape.back()}}}, kScope);
    y = g.add("reshape", {t}, {{"shape", std::vector<int64_t>{-1}}}, kScope);
  }
  const CrossEntropyOptions& ce = opt.cross_entropy;
  if (ce.label_smoothing < 0 || ce.label_smoothing > 1)
    fail("loss: label smoothing must be in [0, 1], got " + std::to_string(ce.label_smoothing));
  int64_t class_dim = rank == 1 ? 0 : (last_dim ? static_cast<int64_t>(rank) - 1 : 1);
  Built b;
  if (ce.class_weights.empty()) {
    AttrMap attrs;
    if (ce.ignore_index != -100) attrs["ignore_index"] = ce.ignore_index;
    if (ce.label_smoothing != 0) attrs["label_smoothing"] = ce.label_smoothing;
    b.loss = g.add("cross_entropy", {x, y}, std::move(attrs), kScope);
  } else {
    const int64_t classes = lt.shape[static_cast<size_t>(class_dim)];
    if (static_cast<int64_t>(ce.class_weights.size()) != classes)
      fail("loss: " + std::to_string(ce.class_weights.size()) + " class weights for logits " + lt.str() + " with " +
           std::to_string(classes) + " classes");
    if (g.findInput(kClassWeightsInput)) fail(std::string("loss: the model already has an input ") + kClassWeightsInput);
    Value* w = g.addInput(kClassWeightsInput, {DType::F32, {classes}}, ValueRole::Const);
    GraphCx cx{g};
    b.loss = decomp::weightedCrossEntropy(cx, x, y, w, "mean", ce.ignore_index, ce.label_smoothing);
  }
  // accuracy = mean(argmax(logits over classes) == target), over the targets
  // that are not ignore_index when one is given.
  Value* pred = g.add("argmax", {logits}, {{"dim", class_dim}}, kScope);
  if (pred->dtype() != t->dtype()) pred = g.add("cast", {pred}, {{"dtype", t->dtype()}}, kScope);
  Value* hit = g.add("cast", {g.add("eq", {pred, t}, {}, kScope)}, {{"dtype", DType::F32}}, kScope);
  if (ce.ignore_index == -100) {
    b.accuracy = g.add("mean", {hit}, {}, kScope);
  } else {
    Value* ignored = g.add("full", {}, {{"dtype", t->dtype()}, {"shape", Shape{}}, {"value", double(ce.ignore_index)}}, kScope);
    Value* kept = g.add("cast", {g.add("ne", {t, ignored}, {}, kScope)}, {{"dtype", DType::F32}}, kScope);
    Value* one = g.add("full", {}, {{"dtype", DType::F32}, {"shape", Shape{}}, {"value", 1.0}}, kScope);
    Value* counted = g.add("maximum", {g.add("sum", {kept}, {}, kScope), one}, {}, kScope);
    b.accuracy = g.add("div", {g.add("sum", {g.add("mul", {hit, kept}, {}, kScope)}, {}, kScope), counted}, {}, kScope);
  }
  return b;
}

Built mse(Graph& g, Value* pred, const TrainingOptions& opt) {
  TensorType target = opt.target.value_or(pred->type());
  if (target != pred->type())
    fail("loss: mse needs a target of the model output's type " + pred->type().str() + ", got " + target.str());
  Value* t = g.addInput("target", target, ValueRole::Data);
  return {g.add("mse_loss", {pred, t}, {}, kScope)};
}

/// l1 / smooth_l1 (beta 1) / huber (delta 1) / bce (binary cross-entropy with
/// logits): the mean over every element, against a float target of the
/// prediction's type, as F.l1_loss, F.smooth_l1_loss, F.huber_loss and
/// F.binary_cross_entropy_with_logits compute them by default.
Built elementwiseLoss(Graph& g, Value* pred, LossKind kind, const TrainingOptions& opt) {
  const std::string name(lossKindName(kind));
  if (!isFloating(pred->dtype())) fail("loss: " + name + " needs a floating prediction, got " + pred->type().str());
  TensorType target = opt.target.value_or(pred->type());
  if (target != pred->type())
    fail("loss: " + name + " needs a target of the model output's type " + pred->type().str() + ", got " +
         target.str());
  Value* t = g.addInput("target", target, ValueRole::Data);
  GraphCx cx{g};
  Value* v = kind == LossKind::Bce ? decomp::bceWithLogits(cx, pred, t, nullptr, nullptr)
                                   : decomp::robustLoss(cx, pred, t, name, 1.0);
  return {decomp::reduceLoss(cx, v, "mean")};
}

/// kl_div: F.kl_div(F.log_softmax(output, -1), target, reduction="batchmean"),
/// the distillation loss: the target is a distribution over the output's
/// last dim (a teacher's softmax), of the output's type; the sum over all
/// elements divided by the batch (dim 0).
Built klDivLoss(Graph& g, Value* pred, const TrainingOptions& opt) {
  if (!isFloating(pred->dtype()) || pred->type().rank() < 1)
    fail("loss: kl_div needs a floating prediction with a class dim, got " + pred->type().str());
  TensorType target = opt.target.value_or(pred->type());
  if (target != pred->type())
    fail("loss: kl_div needs a target distribution of the model output's type " + pred->type().str() + ", got " +
         target.str());
  Value* t = g.addInput("target", target, ValueRole::Data);
  GraphCx cx{g};
  const int64_t last = pred->type().rank() - 1;
  Value* logp = g.add("log_softmax", {pred}, {{"dim", last}}, kScope);
  Value* sum = decomp::reduceLoss(cx, decomp::klDiv(cx, logp, t, false), "sum");
  return {g.add("div", {sum, cx.scalar(static_cast<double>(pred->shape()[0]), pred->dtype())}, {}, kScope)};
}

}  // namespace

Result<PassResult> runLoss(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    for (const GraphOutput& o : g.outputs())
      if (o.role == OutputRole::Loss) fail("loss: the graph already has a loss output");
    Value* pred = nullptr;
    for (const GraphOutput& o : g.outputs())
      if (o.role == OutputRole::Output) {
        pred = o.value;
        break;
      }
    if (!pred) fail("loss: the model has no output to compute a loss from");
    if (g.findInput("target")) fail("loss: the model already has an input named 'target'");
    size_t before = g.numNodes();
    g.setInsertPoint(nullptr);
    Built b;
    switch (ctx.training.loss) {
      case LossKind::CrossEntropy: b = crossEntropy(g, pred, ctx.training); break;
      case LossKind::Mse:
        if (!ctx.training.cross_entropy.isDefault()) fail("loss: cross-entropy options need --loss cross_entropy");
        b = mse(g, pred, ctx.training);
        break;
      case LossKind::L1:
      case LossKind::SmoothL1:
      case LossKind::Huber:
      case LossKind::Bce:
        if (!ctx.training.cross_entropy.isDefault()) fail("loss: cross-entropy options need --loss cross_entropy");
        b = elementwiseLoss(g, pred, ctx.training.loss, ctx.training);
        break;
      case LossKind::KlDiv:
        if (!ctx.training.cross_entropy.isDefault()) fail("loss: cross-entropy options need --loss cross_entropy");
        b = klDivLoss(g, pred, ctx.training);
        break;
      case LossKind::Model:
        if (!ctx.training.cross_entropy.isDefault()) fail("loss: cross-entropy options need --loss cross_entropy");
        if (!pred->shape().empty() || !isFloating(pred->dtype()))
          fail("loss: --loss model needs the model's first output to be the 0-d loss, it is " + pred->type().str());
        b.loss = pred;
        break;
    }
    auto& outs = g.mutableOutputs();
    std::erase_if(outs, [](const GraphOutput& o) { return o.role == OutputRole::Output; });
    g.addOutput(b.loss, "loss", OutputRole::Loss);
    if (b.accuracy) g.addOutput(b.accuracy, "accuracy", OutputRole::Metric);
    PassResult r;
    r.changed = true;
    r.statistics["nodes_added"] = static_cast<double>(g.numNodes() - before);
    return r;
  });
}

}  // namespace kiln
