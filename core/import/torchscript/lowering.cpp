// Lowering context: node emission, tensor reads and in-place writes through
// views, constants, argument access and the combined aten rule table.
#include "core/import/torchscript/lowering.h"

#include <algorithm>

#include "core/ops/op_helpers.h"
#include "core/result.h"

namespace kiln::ts {

namespace {

/// out[i...] = in.flat[offset + sum(i_k * strides_k)] for an i64 index map.
Tensor stridedCopy(const Tensor& in, const Shape& sizes, const Shape& strides, int64_t offset) {
  Tensor out(DType::I64, sizes);
  const int64_t n = numelOf(sizes), rank = static_cast<int64_t>(sizes.size());
  std::vector<int64_t> idx(sizes.size(), 0);
  const int64_t* src = in.data<int64_t>();
  int64_t* dst = out.data<int64_t>();
  for (int64_t j = 0; j < n; ++j) {
    int64_t p = offset;
    for (int64_t k = 0; k < rank; ++k) p += idx[k] * strides[k];
    dst[j] = src[p];
    for (int64_t k = rank - 1; k >= 0; --k) {
      if (++idx[k] < sizes[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

/// Apply one view step to an index map (each element: its position in the root).
Tensor applyStep(const Tensor& in, const ViewStep& s) {
  Shape sizes = in.shape(), strides = contiguousStrides(sizes);
  int64_t offset = 0;
  switch (s.kind) {
    case ViewStep::Kind::Slice:
      offset = s.start * strides[s.dim];
      sizes[s.dim] = normalizeSlice(sizes[s.dim], s.start, s.end, s.step).length;
      strides[s.dim] *= s.step;
      break;
    case ViewStep::Kind::Select:
      offset = s.start * strides[s.dim];
      sizes.erase(sizes.begin() + s.dim);
      strides.erase(strides.begin() + s.dim);
      break;
    case ViewStep::Kind::Reshape:
      return in.reshaped(s.ints);
    case ViewStep::Kind::Permute: {
      Shape ps, pst;
      for (int64_t d : s.ints) {
        ps.push_back(sizes[d]);
        pst.push_back(strides[d]);
      }
      sizes = ps;
      strides = pst;
      break;
    }
    case ViewStep::Kind::Expand: {
      size_t lead = s.ints.size() - sizes.size();
      Shape es(s.ints), est(s.ints.size(), 0);
      for (size_t k = 0; k < sizes.size(); ++k) est[lead + k] = sizes[k] == 1 && es[lead + k] != 1 ? 0 : strides[k];
      sizes = es;
      strides = est;
      break;
    }
  }
  return stridedCopy(in, sizes, strides, offset);
}

/// Each element of the view made by `steps`: its position in a root of shape `rs`.
Tensor viewPositions(const Shape& rs, const std::vector<ViewStep>& steps) {
  Tensor pos(DType::I64, rs);
  const int64_t n = numelOf(rs);
  for (int64_t k = 0; k < n; ++k) pos.data<int64_t>()[k] = k;
  for (const ViewStep& s : steps) pos = applyStep(pos, s);
  return pos;
}

}  // namespace

// ---- Emission ----------------------------------------------------------------

Node* Lowering::emitNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs) {
  return graph().create(op, std::move(inputs), std::move(attrs), scope, provenance);
}

Value* Lowering::emit(std::string_view op, std::vector<Value*> inputs, AttrMap attrs) {
  return graph().add(op, std::move(inputs), std::move(attrs), scope, provenance);
}

Value* Lowering::scalar(double value, DType dtype) {
  return emit("full", {}, {{"shape", Shape{}}, {"value", value}, {"dtype", dtype}});
}

Value* Lowering::cast(Value* v, DType dtype) {
  if (v->dtype() == dtype) return v;
  return emit("cast", {v}, {{"dtype", dtype}});
}

Value* Lowering::operand(const SV& v, DType dtype) {
  if (v.isNumber() || v.isScalarConst()) return scalar(v.number(), dtype);
  return cast(read(v), dtype);
}

Value* Lowering::constInput(const Tensor& t) {
  auto it = const_inputs_.find(t.raw());
  if (it != const_inputs_.end()) return it->second;
  std::string name = "__const." + std::to_string(next_const_++);
  Value* v = graph().addInput(name, t.type(), ValueRole::Const);
  model_.weights[name] = t;
  const_inputs_[t.raw()] = v;
  return v;
}

// ---- Tensors, views and in-place writes -----------------------------------------

Value* Lowering::read(const SV& v) {
  switch (v.kind) {
    case SV::Kind::Tensor: {
      TensorSlot& s = *v.slot;
      if (s.base && s.base->version != s.base_version) {
        if (!untouched(s)) s.value = replay(s.base->value, s.steps);
        s.base_version = s.base->version;
      }
      return s.value;
    }
    case SV::Kind::Const:
      if (v.constant.rank() == 0) return scalar(v.constant.at(0), v.constant.dtype());
      return constInput(v.constant);
    case SV::Kind::Bool:
    case SV::Kind::Int:
    case SV::Kind::Float:
      return scalar(v.number(), dtypeOf(v));
    default:
      fail("expected a tensor, got " + v.describe());
  }
}

Value* Lowering::replay(Value* root, const std::vector<ViewStep>& steps) {
  Value* v = root;
  for (const ViewStep& s : steps) {
    switch (s.kind) {
      case ViewStep::Kind::Slice:
        v = emit("slice", {v}, {{"dim", s.dim}, {"start", s.start}, {"end", s.end}, {"step", s.step}});
        break;
      case ViewStep::Kind::Select:
        v = emit("select", {v}, {{"dim", s.dim}, {"index", s.start}});
        break;
      case ViewStep::Kind::Reshape:
        v = emit("reshape", {v}, {{"shape", s.ints}});
        break;
      case ViewStep::Kind::Permute:
        v = emit("permute", {v}, {{"dims", s.ints}});
        break;
      case ViewStep::Kind::Expand:
        v = emit("expand", {v}, {{"shape", s.ints}});
        break;
    }
  }
  return v;
}

SV Lowering::view(const SV& src, const ViewStep& step, Value* v) {
  if (src.kind != SV::Kind::Tensor) return fresh(v);
  auto slot = std::make_shared<TensorSlot>();
  slot->value = v;
  const auto& s = src.slot;
  slot->base = s->base ? s->base : s;
  if (s->base) slot->steps = s->steps;
  slot->steps.push_back(step);
  slot->base_version = slot->base->version;
  return SV::slotted(std::move(slot));
}

bool Lowering::untouched(TensorSlot& s) {
  const TensorSlot& root = *s.base;
  for (const auto& [version, covered] : root.writes) {
    if (version <= s.base_version) continue;
    if (!covered) return false;
    if (!s.covers) {
      const Tensor pos = viewPositions(root.value->shape(), s.steps);
      auto mask = std::make_shared<Tensor>(DType::Bool, root.value->shape());
      for (int64_t k = 0; k < pos.numel(); ++k) mask->data<uint8_t>()[pos.data<int64_t>()[k]] = 1;
      s.covers = std::move(mask);
    }
    const uint8_t *a = covered->data<uint8_t>(), *b = s.covers->data<uint8_t>();
    for (int64_t k = 0; k < covered->numel(); ++k)
      if (a[k] && b[k]) return false;
  }
  return true;
}

Value* Lowering::writeBack(Value* root, const std::vector<ViewStep>& steps, Value* v,
                           std::shared_ptr<const Tensor>& covered_out) {
  // Where each element of the view lives in the root, computed now.
  const Shape& rs = root->shape();
  const int64_t n = numelOf(rs);
  const Tensor pos = viewPositions(rs, steps);
  const int64_t m = pos.numel();
  bool whole = m == n;
  for (int64_t k = 0; whole && k < m; ++k) whole = pos.data<int64_t>()[k] == k;
  covered_out = nullptr;
  if (whole) return emit("reshape", {v}, {{"shape", rs}});
  // root' = where(covered, view_values[src_pos], root)
  auto covered_mask = std::make_shared<Tensor>(DType::Bool, rs);
  Tensor& covered = *covered_mask;
  Tensor src(DType::I64, rs);
  for (int64_t k = 0; k < m; ++k) {
    int64_t p = pos.data<int64_t>()[k];
    if (covered.data<uint8_t>()[p]) fail("in-place write into an expanded view (several elements share memory)");
    covered.data<uint8_t>()[p] = 1;
    src.data<int64_t>()[p] = k;
  }
  covered_out = covered_mask;
  // A fill (x[a:b] = 3) needs no gather: one value goes everywhere it covers.
  Node* p = v->producer();
  if (p && p->is(Op::full)) return emit("where", {constInput(covered), scalar(p->f("value"), v->dtype()), root});
  if (p && p->is(Op::expand) && p->input(0)->type().numel() == 1 && p->input(0)->type().rank() <= root->type().rank())
    return emit("where", {constInput(covered), p->input(0), root});
  Value* flat = emit("reshape", {v}, {{"shape", Shape{m}}});
  Value* spread = emit("index", {flat, constInput(src)}, {{"dim", int64_t{0}}});
  return emit("where", {constInput(covered), spread, root});
}

void Lowering::write(const SV& target, Value* v) {
  if (target.kind != SV::Kind::Tensor)
    fail("in-place write into " + target.describe() + "; only tensors computed at run time can be written");
  TensorSlot& s = *target.slot;
  Value* cur = read(target);
  v = cast(v, cur->dtype());
  if (v->shape() != cur->shape()) v = emit("expand", {v}, {{"shape", cur->shape()}});
  if (s.base) {
    TensorSlot& root = *s.base;
    std::shared_ptr<const Tensor> covered;
    root.value = writeBack(root.value, s.steps, v, covered);
    ++root.version;
    root.writes.emplace_back(root.version, std::move(covered));
    s.base_version = root.version;
  } else {
    ++s.version;
    s.writes.emplace_back(s.version, nullptr);
  }
  s.value = v;
}

bool Lowering::requiresGrad(Value* v) {
  auto it = requires_grad_.find(v);
  if (it != requires_grad_.end()) return it->second;
  bool r = false;
  if (v->isGraphInput()) {
    r = v->role() == ValueRole::Param;
  } else {
    for (Value* in : v->producer()->inputs()) r = r || requiresGrad(in);
  }
  requires_grad_[v] = r;
  return r;
}

// ---- Arguments ------------------------------------------------------------------

const SV& Args::operator[](size_t k) const {
  if (k >= values_.size())
    fail("expects at least " + std::to_string(k + 1) + " arguments, got " + std::to_string(values_.size()));
  return values_[k];
}

Value* Args::tensor(size_t k) {
  return cx_.read((*this)[k]);
}

int64_t Args::integer(size_t k) const {
  const SV& v = (*this)[k];
  if (v.kind == SV::Kind::Int || v.kind == SV::Kind::Bool) return v.i;
  if (v.isScalarConst() && !isFloating(v.constant.dtype())) return static_cast<int64_t>(v.constant.at(0));
  fail("argument " + std::to_string(k) + " must be an int known at import time, got " + v.describe());
}

double Args::real(size_t k) const {
  const SV& v = (*this)[k];
  if (v.isNumber() || v.isScalarConst()) return v.number();
  fail("argument " + std::to_string(k) + " must be a number known at import time, got " + v.describe());
}

bool Args::flag(size_t k) const {
  const SV& v = (*this)[k];
  if (v.isNumber() || v.isScalarConst()) return v.number() != 0;
  fail("argument " + std::to_string(k) + " must be a bool known at import time, got " + v.describe());
}

const std::string& Args::str(size_t k) const {
  const SV& v = (*this)[k];
  if (v.kind != SV::Kind::Str) fail("argument " + std::to_string(k) + " must be a string, got " + v.describe());
  return v.s;
}

std::vector<int64_t> Args::ints(size_t k) const {
  const SV& v = (*this)[k];
  if (v.kind == SV::Kind::Int) return {v.i};
  if (!v.isSequence()) fail("argument " + std::to_string(k) + " must be a list of ints, got " + v.describe());
  std::vector<int64_t> out;
  for (const SV& e : *v.items) {
    if (e.kind == SV::Kind::Int || e.kind == SV::Kind::Bool)
      out.push_back(e.i);
    else if (e.isScalarConst() && !isFloating(e.constant.dtype()))
      out.push_back(static_cast<int64_t>(e.number()));
    else
      fail("argument " + std::to_string(k) + " must be a list of ints known at import time, got " + v.describe());
  }
  return out;
}

std::optional<int64_t> Args::optInt(size_t k) const {
  if (!given(k)) return std::nullopt;
  return integer(k);
}

std::optional<double> Args::optReal(size_t k) const {
  if (!given(k)) return std::nullopt;
  return real(k);
}

std::optional<DType> Args::optDType(size_t k) const {
  if (!given(k)) return std::nullopt;
  int64_t code = integer(k);
  auto d = dtypeFromScalarType(code);
  if (!d) fail("dtype code " + std::to_string(code) + " (complex or quantized) is not supported by Kiln");
  return d;
}

int64_t normDim(int64_t dim, int64_t rank) { return normalizeAxis(dim, rank); }

// ---- The rule table ---------------------------------------------------------------

namespace {
const std::map<std::string_view, const AtenRule*>& ruleMap() {
  static const auto* map = [] {
    auto* m = new std::map<std::string_view, const AtenRule*>();
    for (auto family :
         {elementwiseRules(), shapeRules(), factoryRules(), nnRules(), reductionRules(), lossRules(), resampleRules(),
          rnnRules()})
      for (const AtenRule& r : family) (*m)[r.aten] = &r;
    return m;
  }();
  return *map;
}
}  // namespace

const AtenRule* findAtenRule(std::string_view aten) {
  auto it = ruleMap().find(aten);
  return it == ruleMap().end() ? nullptr : it->second;
}

std::vector<std::string> atenRuleNames() {
  std::vector<std::string> names;
  for (const auto& [name, rule] : ruleMap()) names.emplace_back(name);
  return names;
}

}  // namespace kiln::ts
