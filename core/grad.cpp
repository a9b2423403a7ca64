#include "core/grad.h"

#include "core/result.h"

namespace kiln {

bool isDifferentiable(DType dt) { return isFloating(dt); }

Node* GradContext::opNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs) {
  // Value ids are renumbered when printed, so name the forward node by op,
  // scope and its own provenance instead.
  std::string from = "grad of " + node_.describe();
  if (!node_.provenance().empty()) from += " (" + node_.provenance() + ")";
  return graph_.create(op, std::move(inputs), std::move(attrs), node_.scope(), std::move(from));
}

Value* GradContext::op(std::string_view op, std::vector<Value*> inputs, AttrMap attrs) {
  Node* n = opNode(op, std::move(inputs), std::move(attrs));
  return n->output();
}

Value* GradContext::fill(const TensorType& t, double v) {
  return op("full", {}, {{"shape", t.shape}, {"value", v}, {"dtype", t.dtype}});
}

Value* GradContext::scalar(double v, DType dt) { return fill({dt, {}}, v); }

Value* GradContext::gradOrZeros(size_t i) {
  if (!out_grads_.at(i)) out_grads_[i] = fill(out(i)->type(), 0.0);
  return out_grads_[i];
}

Value* GradContext::castTo(Value* v, DType dt) {
  if (v->dtype() == dt) return v;
  return op("cast", {v}, {{"dtype", dt}});
}

Value* GradContext::sumTo(Value* g, const Shape& shape) {
  const Shape& gs = g->shape();
  if (gs == shape) return g;
  if (shape.size() > gs.size())
    fail(node_.describe() + ": gradient " + g->type().str() + " cannot be reduced to " + shapeStr(shape));
  // Leading dims that broadcasting added, plus dims that were size 1.
  size_t lead = gs.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < gs.size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && gs[d] != 1)) dims.push_back(static_cast<int64_t>(d));
    else if (shape[d - lead] != gs[d])
      fail(node_.describe() + ": gradient " + g->type().str() + " does not broadcast to " + shapeStr(shape));
  Value* s = dims.empty() ? g : op("sum", {g}, {{"dims", dims}, {"keepdim", int64_t{1}}});
  if (s->shape() == shape) return s;
  return op("reshape", {s}, {{"shape", std::vector<int64_t>(shape.begin(), shape.end())}});
}

void GradContext::setGrad(size_t i, Value* g) {
  if (i >= in_grads_.size()) fail(node_.describe() + ": gradient rule set input " + std::to_string(i) + " of " +
                                  std::to_string(in_grads_.size()));
  if (!needs(i)) return;
  Value* x = node_.input(i);
  if (g->shape() != x->shape())
    fail(node_.describe() + ": gradient rule produced " + g->type().str() + " for input " + std::to_string(i) +
         " of type " + x->type().str());
  if (!isDifferentiable(g->dtype()))
    fail(node_.describe() + ": gradient rule produced non-floating " + g->type().str());
  in_grads_[i] = castTo(g, x->dtype());
}

void GradContext::setGradBroadcast(size_t i, Value* g) {
  if (!needs(i)) return;
  setGrad(i, sumTo(g, node_.input(i)->shape()));
}

}  // namespace kiln
