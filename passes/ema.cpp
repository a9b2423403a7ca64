// ema: the exponential moving average of the weights, as optimizer state.
//
// Needs: the optimizer (the `step` counter's OptStateUpdate output, the
// ParamUpdate outputs) and freeze (a frozen parameter has no ParamUpdate:
// its average follows the unchanged value, as AveragedModel averages every
// parameter whether it trains or not). Does nothing without
// ctx.training.ema_decay. Does: per Param input and floating-point Buffer
// input P (BatchNorm's running statistics: AveragedModel(use_buffers=True),
// Composer's and timm's EMA average them too; integer buffers such as
// num_batches_tracked stay the model's), an OptState input ema.P
// (zeros before the first step, like the rest of the optimizer state) and
// an OptStateUpdate output of the same name holding
// d' * ema.P + (1 - d') * P_new (P_new: P's ParamUpdate or BufferUpdate
// output, else P), with d' = d * min(step - 1, 1) computed from
// the step count after this step: 0 at the first step (the average starts as
// a copy of the weights, AveragedModel's first update_parameters), d after.
// The factors are rounded to the parameter's type first, as PyTorch's
// Python-number scalars are. Guarantees: the step's other outputs unchanged.
#include "passes/ema.h"

#include <algorithm>
#include <map>

#include "core/dtype.h"
#include "passes/graph_constants.h"
#include "passes/optimizer.h"

namespace kiln {
namespace {

constexpr const char* kScope = "ema";

}  // namespace

std::string emaStateName(const std::string& param) {
  return "ema." + param;
}

Result<PassResult> runEma(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    const double d = ctx.training.ema_decay;
    if (d == 0) return {};
    if (!(d > 0 && d < 1)) fail("ema: the decay must be in (0, 1), got " + std::to_string(d));
    Value* next_step = nullptr;
    std::map<std::string, Value*> updated;
    for (const GraphOutput& o : g.outputs()) {
      if (o.role == OutputRole::OptStateUpdate && o.name == kStepInput) next_step = o.value;
      if (o.role == OutputRole::ParamUpdate || o.role == OutputRole::BufferUpdate) updated[o.name] = o.value;
    }
    if (!next_step) fail("ema: needs the optimizer pass first (no '" + std::string(kStepInput) + "' update)");
    g.setInsertPoint(nullptr);
    const size_t before = g.numNodes();
    Value* one = scalarConstant(g, 1.0, DType::F64, kScope);
    Value* since_first = g.add("minimum", {g.add("sub", {next_step, one}, {}, kScope), one}, {}, kScope);
    Value* decay = g.add("mul", {since_first, scalarConstant(g, d, DType::F64, kScope)}, {}, kScope);
    Value* rest = g.add("sub", {one, decay}, {}, kScope);
    std::map<DType, std::pair<Value*, Value*>> factors;  // per parameter dtype: (d', 1 - d')
    std::vector<Value*> params;  // and floating-point buffers (BatchNorm's running statistics)
    size_t buffers = 0;
    for (Value* v : g.inputs())
      if (v->role() == ValueRole::Param || (v->role() == ValueRole::Buffer && isFloating(v->dtype()))) {
        params.push_back(v);
        buffers += v->role() == ValueRole::Buffer;
      }
    for (Value* p : params) {
      const std::string name = emaStateName(p->name());
      if (g.findInput(name)) fail("ema: the model already has an input named '" + name + "'");
      auto [it, fresh] = factors.try_emplace(p->dtype());
      if (fresh)
        it->second = p->dtype() == DType::F64
                         ? std::pair{decay, rest}
                         : std::pair{g.add("cast", {decay}, {{"dtype", p->dtype()}}, kScope),
                                     g.add("cast", {rest}, {{"dtype", p->dtype()}}, kScope)};
      Value* avg = g.addInput(name, p->type(), ValueRole::OptState);
      auto up = updated.find(p->name());
      Value* now = up != updated.end() ? up->second : p;
      Value* next = g.add("add",
                          {g.add("mul", {it->second.first, avg}, {}, kScope),
                           g.add("mul", {it->second.second, now}, {}, kScope)},
                          {}, kScope);
      g.addOutput(next, name, OutputRole::OptStateUpdate);
    }
    PassResult r;
    r.changed = !params.empty();
    r.statistics["params_averaged"] = static_cast<double>(params.size() - buffers);
    r.statistics["buffers_averaged"] = static_cast<double>(buffers);
    r.statistics["nodes_added"] = static_cast<double>(g.numNodes() - before);
    return r;
  });
}

}  // namespace kiln
