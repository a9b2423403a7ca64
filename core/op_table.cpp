#include "core/op_table.h"

#include <cstdio>
#include <cstdlib>

#include "core/ir.h"

namespace kiln {

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
  std::string name = def.name;
  if (!ops_.emplace(name, std::move(def)).second) {
    std::fprintf(stderr, "kiln: op '%s' registered twice\n", name.c_str());
    std::abort();
  }
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

Cost nodeCost(const Node& n) { return n.def().cost ? n.def().cost(n) : defaultCost(n); }

}  // namespace kiln
