// Lowering state shared by the rule families, and the merged rule table.
#include "core/import/fx/fx_lowering.h"

#include <algorithm>
#include <map>

#include "core/result.h"

namespace kiln::fx {

Node* Lowering::emitNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs) {
  Node* n = graph_.create(op, std::move(inputs), std::move(attrs), scope, provenance);
  // Every value stays small enough that later shape arithmetic cannot overflow.
  for (Value* v : n->outputs())
    if (boundedNumel(v->shape()) < 0) fail(n->describe() + ": result " + v->type().str() + " is too large");
  return n;
}

Value* Lowering::emit(std::string_view op, std::vector<Value*> inputs, AttrMap attrs) {
  Node* n = emitNode(op, std::move(inputs), std::move(attrs));
  if (n->numOutputs() != 1) fail(n->describe() + ": expected one result");
  return n->output();
}

Value* Lowering::full(double value, DType dtype, Shape shape) {
  return emit("full", {}, {{"shape", std::move(shape)}, {"value", value}, {"dtype", dtype}});
}

Value* Lowering::cast(Value* v, DType dtype) {
  return v->dtype() == dtype ? v : emit("cast", {v}, {{"dtype", dtype}});
}

Value* Lowering::reshape(Value* v, Shape shape) {
  return v->shape() == shape ? v : emit("reshape", {v}, {{"shape", std::move(shape)}});
}

Value* Lowering::expand(Value* v, Shape shape) {
  return v->shape() == shape ? v : emit("expand", {v}, {{"shape", std::move(shape)}});
}

Value* Lowering::constInput(const Tensor& t) {
  const std::string name = "__const.kiln." + std::to_string(constants.size());
  Value* v = graph_.addInput(name, t.type(), ValueRole::Const);
  constants[name] = t;
  return v;
}

const Tensor* Lowering::knownValue(const Value* v) const {
  if (v->producer() || v->role() != ValueRole::Const) return nullptr;
  for (const TensorMap* m : {&constants, weights}) {
    if (!m) continue;
    auto it = m->find(v->name());
    if (it != m->end()) return &it->second;
  }
  return nullptr;
}

std::optional<Tensor> Lowering::evaluate(const Value* v) const {
  if (const Tensor* t = knownValue(v)) return *t;
  const Node* p = v->producer();
  if (!p) return std::nullopt;
  Tensor out(v->type());
  if (p->is(Op::full)) {
    for (int64_t i = 0; i < out.numel(); ++i) out.set(i, p->f("value"));
    return out;
  }
  if (!p->is(Op::reshape) && !p->is(Op::expand) && !p->is(Op::cast)) return std::nullopt;
  const std::optional<Tensor> in = evaluate(p->input(0));
  if (!in) return std::nullopt;
  // reshape and cast keep the row-major order; expand reads each output
  // element's broadcast source (the input's shape right-aligned, size-1 dims
  // read at 0).
  const Shape& is = in->type().shape;
  const Shape& os = out.type().shape;
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t src = i;
    if (p->is(Op::expand)) {
      src = 0;
      int64_t rest = i, stride = 1;
      for (size_t d = os.size(); d-- > 0;) {
        const int64_t c = rest % os[d];
        rest /= os[d];
        const size_t back = os.size() - 1 - d;
        if (back >= is.size()) continue;
        const int64_t size = is[is.size() - 1 - back];
        src += (size == 1 ? 0 : c) * stride;
        stride *= size;
      }
    }
    out.set(i, in->at(src));
  }
  return out;
}

Value* Lowering::permute(Value* v, std::vector<int64_t> dims) {
  bool identity = true;
  for (size_t i = 0; i < dims.size(); ++i) identity = identity && dims[i] == static_cast<int64_t>(i);
  if (identity && static_cast<int64_t>(dims.size()) == v->type().rank()) return v;
  return emit("permute", {v}, {{"dims", std::move(dims)}});
}

Value* Lowering::materialize(const Operand& o, DType dtype) {
  return o.isNumber() ? full(o.number.value, dtype) : cast(o.tensor, dtype);
}

void Lowering::define(const std::string& name, FxValue v) { env_[name] = std::move(v); }

const FxValue& Lowering::lookup(const std::string& name) const {
  auto it = env_.find(name);
  if (it == env_.end()) fail("reference to " + quote(name) + ", which is not defined before this point");
  return it->second;
}

int64_t normDim(int64_t dim, int64_t rank) { return normalizeAxis(dim, rank); }

namespace {
const std::map<std::string_view, const FxRule*>& ruleIndex() {
  static const auto* index = [] {
    auto* m = new std::map<std::string_view, const FxRule*>();
    for (auto family : {elementwiseRules(), shapeRules(), factoryRules(), reductionRules(), linalgRules(), nnRules(),
                        resampleRules(), symbolicRules()})
      for (const FxRule& r : family) m->emplace(r.target, &r);
    return m;
  }();
  return *index;
}
}  // namespace

const FxRule* findFxRule(std::string_view target) {
  auto it = ruleIndex().find(target);
  return it == ruleIndex().end() ? nullptr : it->second;
}

std::vector<std::string> fxRuleTargets() {
  std::vector<std::string> out;
  for (const auto& [k, r] : ruleIndex()) out.emplace_back(k);
  return out;
}

}  // namespace kiln::fx
