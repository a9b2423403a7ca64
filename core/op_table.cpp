#include "core/op_table.h"

#include <cstdio>
#include <cstdlib>

#include "core/ir.h"

namespace kiln {

// core/ops/attention.cpp: attention, attention_backward (made by the fuse_attention pass).
void registerAttentionOps(OpTable& t);

const AttrSpec* OpDef::findAttr(const std::string& n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

const OpTable& OpTable::get() {
  static const OpTable table = [] {
    OpTable t;
    registerElementwiseOps(t);
    registerReductionOps(t);
    registerShapeOps(t);
    registerLinalgOps(t);
    registerNNOps(t);
    registerLossOps(t);
    registerOptimizerOps(t);
    registerCollectiveOps(t);
    registerRowSparseOps(t);
    registerElementwiseGrads(t);
    registerReductionGrads(t);
    registerShapeGrads(t);
    registerLinalgGrads(t);
    registerNNGrads(t);
    registerNormGrads(t);
    registerLossGrads(t);
    registerFusedOps(t);
    registerAttentionOps(t);
    return t;
  }();
  return table;
}

const OpDef* OpTable::find(std::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

void OpTable::add(OpDef def) {
  if (!def.infer) {
    std::fprintf(stderr, "kiln: op '%s' registered without shape inference\n", def.name.c_str());
    std::abort();
  }
  const std::optional<Op> id = opByName(def.name);
  if (!id) {
    std::fprintf(stderr, "kiln: op '%s' is not in core/op_names.h's KILN_OP_LIST\n", def.name.c_str());
    std::abort();
  }
  def.id = *id;
  std::string name = def.name;
  if (!ops_.emplace(name, std::move(def)).second) {
    std::fprintf(stderr, "kiln: op '%s' registered twice\n", name.c_str());
    std::abort();
  }
}

static OpDef& mustFind(std::map<std::string, OpDef, std::less<>>& ops, std::string_view op) {
  auto it = ops.find(op);
  if (it == ops.end()) {
    std::fprintf(stderr, "kiln: gradient for unknown op '%.*s'\n", static_cast<int>(op.size()), op.data());
    std::abort();
  }
  return it->second;
}

void OpTable::setGrad(std::string_view op, GradFn fn) {
  mustFind(ops_, op).grad = fn;
}

void OpTable::setNoGrad(std::string_view op, std::string reason) {
  mustFind(ops_, op).no_grad_reason = std::move(reason);
}

double ioBytes(const Node& n) {
  double b = 0;
  for (Value* v : n.inputs()) b += static_cast<double>(v->type().bytes());
  for (Value* v : n.outputs()) b += static_cast<double>(v->type().bytes());
  return b;
}

Cost defaultCost(const Node& n) {
  double flops = 0;
  for (Value* v : n.outputs()) flops += static_cast<double>(v->type().numel());
  return {flops, ioBytes(n)};
}

Cost nodeCost(const Node& n) {
  return n.def().cost ? n.def().cost(n) : defaultCost(n);
}

}  // namespace kiln
