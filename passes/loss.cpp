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
#include "core/import/decompositions.h"

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
  Built b{g.add("cross_entropy", {x, y}, {}, kScope)};
  // accuracy = mean(argmax(logits over classes) == target)
  int64_t class_dim = rank == 1 ? 0 : (last_dim ? static_cast<int64_t>(rank) - 1 : 1);
  Value* pred = g.add("argmax", {logits}, {{"dim", class_dim}}, kScope);
  if (pred->dtype() != t->dtype()) pred = g.add("cast", {pred}, {{"dtype", t->dtype()}}, kScope);
  Value* hit = g.add("cast", {g.add("eq", {pred, t}, {}, kScope)}, {{"dtype", DType::F32}}, kScope);
  b.accuracy = g.add("mean", {hit}, {}, kScope);
  return b;
}

Built mse(Graph& g, Value* pred, const TrainingOptions& opt) {
  TensorType target = opt.target.value_or(pred->type());
  if (target != pred->type())
    fail("loss: mse needs a target of the model output's type " + pred->type().str() + ", got " + target.str());
  Value* t = g.addInput("target", target, ValueRole::Data);
  return {g.add("mse_loss", {pred, t}, {}, kScope)};
}

/// The lowering context core/import/decompositions.h needs, over the graph
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
};

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
      case LossKind::Mse: b = mse(g, pred, ctx.training); break;
      case LossKind::L1:
      case LossKind::SmoothL1:
      case LossKind::Huber:
      case LossKind::Bce: b = elementwiseLoss(g, pred, ctx.training.loss, ctx.training); break;
      case LossKind::Model:
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
