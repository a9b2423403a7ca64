// optimizer: appends the parameter update to a graph with Gradient outputs.
//
// Needs: autodiff has run (Gradient outputs named like their parameters).
// Does: adds the optimizer state as graph state (OptState inputs, updated by
// OptStateUpdate outputs), the learning rate as a Scalar input, optional
// global-norm clipping, and one sgd_update / adam_update node over every
// parameter (multi-tensor: one kernel for the whole update); under Muon, the
// hidden matrices get Muon's graph ops instead (passes/muon.h). Nothing here
// needs a value on the host: clipping is a coefficient tensor, the step
// counter is a tensor, so the step runs without a device-to-host sync.
// Under ZeRO-1 the update covers this rank's shard and allgathers follow it
// (optimizer.h).
// Guarantees: every trained parameter has a ParamUpdate output; no Gradient
// outputs remain.
#include "passes/optimizer.h"

#include <algorithm>
#include <map>

#include "passes/amp.h"
#include "passes/graph_constants.h"
#include "passes/muon.h"

namespace kiln {
namespace {

constexpr const char* kScope = "optimizer";

Value* constant(Graph& g, double v, DType dt) {
  return scalarConstant(g, v, dt, kScope);
}

/// ZeRO-1's clipping norm: `partial` is the norm of this rank's gradients;
/// the global one is the square root of the sum over ranks of their squares.
Value* zeroGlobalNorm(Graph& g, Value* partial) {
  Value* squares = g.add("mul", {partial, partial}, {}, kScope);
  Node* sum = g.create("allreduce", {squares}, {{"bucket", int64_t{-2}}, {"average", int64_t{0}}}, kScope);
  return g.add("sqrt", {sum->output(0)}, {}, kScope);
}

/// ZeRO-1: every rank gets every parameter as its owner updated it, through
/// allgathers of about bucket_bytes each, in the plan's order; the
/// ParamUpdate outputs are their results. `updated`: this rank's updates.
void gatherShardedParams(Graph& g, const ZeroShardPlan& plan, const DataParallelOptions& dp,
                         const std::map<std::string, Value*>& updated) {
  struct Bucket {
    std::vector<Value*> ins;
    std::vector<int64_t> owners;
    std::vector<std::string> names;
    uint64_t bytes = 0;
  };
  std::vector<Bucket> buckets;
  for (const auto& [name, owner] : plan.owners) {
    Value* param = g.findInput(name);
    if (!param) fail("optimizer: ZeRO-1 plan names '" + name + "', which is not an input");
    Value* in = param;  // another rank's parameter: a placeholder of its type
    if (owner == dp.rank) {
      auto it = updated.find(name);
      if (it == updated.end()) fail("optimizer: ZeRO-1 gives '" + name + "' to this rank but it has no update");
      in = it->second;
    }
    if (buckets.empty() || buckets.back().bytes >= dp.bucket_bytes) buckets.emplace_back();
    Bucket& b = buckets.back();
    b.ins.push_back(in);
    b.owners.push_back(owner);
    b.names.push_back(name);
    b.bytes += param->type().bytes();
  }
  for (size_t k = 0; k < buckets.size(); ++k) {
    Bucket& b = buckets[k];
    Node* n = g.create(
        "allgather", b.ins,
        {{"bucket", static_cast<int64_t>(k)}, {"rank", static_cast<int64_t>(dp.rank)}, {"owners", b.owners}}, kScope);
    for (size_t i = 0; i < b.names.size(); ++i) g.addOutput(n->output(i), b.names[i], OutputRole::ParamUpdate);
  }
}

}  // namespace

std::string optimizerStateName(const std::string& kind, const std::string& param) {
  return kind + "." + param;
}

Result<PassResult> runOptimizer(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    const OptimizerOptions& opt = ctx.training.optimizer;
    std::vector<std::pair<Value*, Value*>> pairs;  // (param, grad)
    for (const GraphOutput& o : g.outputs())
      if (o.role == OutputRole::Gradient) {
        Value* p = g.findInput(o.name);
        if (!p || p->role() != ValueRole::Param) fail("optimizer: gradient output '" + o.name + "' names no parameter");
        pairs.emplace_back(p, o.value);
      }
    // ZeRO-1 (data_parallel made ctx.zero_plan): this rank updates only the
    // parameters it owns, whose gradients are the ones left; a frozen one
    // has neither owner nor update here.
    const ZeroShardPlan* zero = ctx.zero_plan ? &*ctx.zero_plan : nullptr;
    if (zero) {
      if (ctx.training.amp.scalesLoss())
        fail("optimizer: ZeRO-1 with fp16 loss scaling is not supported (the ranks' overflow checks would disagree)");
      std::erase_if(pairs, [&](const auto& pg) { return ctx.training.frozen.count(pg.first->name()) != 0; });
    }
    if (pairs.empty() && !zero) fail("optimizer: nothing to train (no parameter gets a gradient from the loss)");
    for (const char* name : {kLearningRateInput, kStepInput})
      if (g.findInput(name)) fail(std::string("optimizer: the model already has an input named '") + name + "'");

    g.setInsertPoint(nullptr);
    size_t before = g.numNodes();
    // The learning rate and the step count are Python numbers in torch.optim:
    // doubles here (an f32 step would stop counting at 2^24). The clipping
    // coefficient is a tensor of the gradients' type in clip_grad_norm_: f64
    // for an all-f64 model, else f32.
    const TensorType host_scalar{DType::F64, {}};
    Value* lr = g.addInput(kLearningRateInput, host_scalar, ValueRole::Scalar);
    Value* step = g.addInput(kStepInput, host_scalar, ValueRole::OptState);
    Value* next_step = g.add("add", {step, constant(g, 1.0, DType::F64)}, {}, kScope);
    const bool all_f64 = std::ranges::all_of(pairs, [](auto& pg) { return pg.first->dtype() == DType::F64; });
    const DType coef_dt = all_f64 ? DType::F64 : DType::F32;
    // fp16 loss scaling (passes/amp.h): the gradients carry the scale. They are
    // unscaled through grad_scale, and a step with an inf/NaN gradient is
    // skipped by the update itself (skip_nonfinite): no host sync.
    std::vector<Value*> all_grads;
    for (auto& [p, gr] : pairs) all_grads.push_back(gr);
    std::optional<LossScaleStep> scaler = addLossScaleUpdate(g, all_grads, ctx.training.amp);
    Value* inv_scale = nullptr;
    if (scaler) {
      next_step = g.add("where", {scaler->found_inf, step, next_step}, {}, kScope);  // a skipped step does not count
      inv_scale = scaler->inv_scale;
      if (inv_scale->dtype() != coef_dt) inv_scale = g.add("cast", {inv_scale}, {{"dtype", coef_dt}}, kScope);
    }

    Value* grad_scale;
    Value* grad_norm = nullptr;
    if (opt.clip_grad_norm > 0) {
      std::vector<Value*> grads;
      for (auto& [p, gr] : pairs) grads.push_back(gr);
      grad_norm = grads.empty() ? constant(g, 0.0, coef_dt) : g.add("global_norm", grads, {}, kScope);
      if (grad_norm->dtype() != coef_dt) grad_norm = g.add("cast", {grad_norm}, {{"dtype", coef_dt}}, kScope);
      if (zero) grad_norm = zeroGlobalNorm(g, grad_norm);
      if (inv_scale) grad_norm = g.add("mul", {grad_norm, inv_scale}, {}, kScope);  // the unscaled gradients' norm
      // clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1.
      Value* denom = g.add("add", {grad_norm, constant(g, 1e-6, coef_dt)}, {}, kScope);
      Value* coef = g.add("div", {constant(g, opt.clip_grad_norm, coef_dt), denom}, {}, kScope);
      grad_scale = g.add("clamp", {coef}, {{"max", 1.0}}, kScope);
    } else {
      grad_scale = constant(g, 1.0, coef_dt);
    }
    if (inv_scale) grad_scale = g.add("mul", {grad_scale, inv_scale}, {}, kScope);

    // Muon: its matrices leave the multi-tensor update for graph ops of their own (passes/muon.h).
    std::vector<std::pair<Value*, Value*>> muon_pairs;
    if (opt.kind == OptimizerKind::Muon) {
      if (scaler) fail("optimizer: Muon with fp16 loss scaling is not supported; use --amp bf16");
      // freeze (after this pass) prunes the groups of multi-tensor update nodes; a Muon matrix has none.
      for (const std::string& name : ctx.training.frozen)
        if (const Value* p = g.findInput(name); p && trainsWithMuon(*p))
          fail("optimizer: freezing '" + name + "', a matrix Muon trains, is not supported");
      std::erase_if(pairs, [&](const auto& pg) {
        if (!trainsWithMuon(*pg.first)) return false;
        muon_pairs.push_back(pg);
        return true;
      });
    }
    const bool scaled = opt.clip_grad_norm > 0 || inv_scale;

    std::vector<Value*> inputs = {lr, next_step, grad_scale};
    std::vector<std::pair<std::string, OutputRole>> out_names;
    auto stateInput = [&](const char* kind, Value* p) {
      std::string name = optimizerStateName(kind, p->name());
      if (g.findInput(name)) fail("optimizer: the model already has an input named '" + name + "'");
      return g.addInput(name, p->type(), ValueRole::OptState);
    };
    AttrMap attrs;
    std::string op;
    if (opt.kind == OptimizerKind::Sgd) {
      op = "sgd_update";
      attrs = {{"momentum", opt.momentum},
               {"dampening", opt.dampening},
               {"nesterov", int64_t{opt.nesterov}},
               {"weight_decay", opt.weightDecay()}};
      for (auto& [p, gr] : pairs) {
        inputs.insert(inputs.end(), {p, gr});
        out_names.emplace_back(p->name(), OutputRole::ParamUpdate);
        if (opt.momentum != 0) {
          Value* buf = stateInput("momentum_buffer", p);
          inputs.push_back(buf);
          out_names.emplace_back(buf->name(), OutputRole::OptStateUpdate);
        }
      }
    } else {
      op = "adam_update";
      attrs = {{"beta1", opt.beta1},
               {"beta2", opt.beta2},
               {"eps", opt.eps},
               {"weight_decay", opt.weightDecay()},
               {"decoupled", int64_t{opt.kind != OptimizerKind::Adam}}};
      for (auto& [p, gr] : pairs) {
        Value* m = stateInput("exp_avg", p);
        Value* v = stateInput("exp_avg_sq", p);
        inputs.insert(inputs.end(), {p, gr, m, v});
        out_names.emplace_back(p->name(), OutputRole::ParamUpdate);
        out_names.emplace_back(m->name(), OutputRole::OptStateUpdate);
        out_names.emplace_back(v->name(), OutputRole::OptStateUpdate);
      }
    }
    if (scaler) attrs["skip_nonfinite"] = int64_t{1};
    Node* update = pairs.empty() ? nullptr : g.create(op, inputs, attrs, kScope);

    auto& outs = g.mutableOutputs();
    std::erase_if(outs, [](const GraphOutput& o) { return o.role == OutputRole::Gradient; });
    std::vector<Value*> results;
    for (size_t i = 0; i < out_names.size(); ++i) results.push_back(update->output(i));
    if (!muon_pairs.empty()) {
      if (g.findInput(kMuonLearningRateInput))
        fail(std::string("optimizer: the model already has an input named '") + kMuonLearningRateInput + "'");
      Value* muon_lr = g.addInput(kMuonLearningRateInput, host_scalar, ValueRole::Scalar);
      for (auto& [p, gr] : muon_pairs) {
        Value* buf = stateInput("momentum_buffer", p);
        MuonUpdate m = addMuonUpdate(g, p, gr, buf, muon_lr, scaled ? grad_scale : nullptr, opt);
        results.insert(results.end(), {m.param, m.momentum_buffer});
        out_names.emplace_back(p->name(), OutputRole::ParamUpdate);
        out_names.emplace_back(buf->name(), OutputRole::OptStateUpdate);
      }
    }
    std::map<std::string, Value*> updated;
    for (size_t i = 0; i < out_names.size(); ++i) {
      if (out_names[i].second == OutputRole::ParamUpdate) updated[out_names[i].first] = results[i];
      if (out_names[i].second != OutputRole::ParamUpdate || !zero)
        g.addOutput(results[i], out_names[i].first, out_names[i].second);
    }
    if (zero) gatherShardedParams(g, *zero, ctx.training.data_parallel, updated);
    g.addOutput(next_step, kStepInput, OutputRole::OptStateUpdate);
    if (grad_norm) g.addOutput(grad_norm, "grad_norm", OutputRole::Metric);

    PassResult r;
    r.changed = true;
    r.statistics["nodes_added"] = static_cast<double>(g.numNodes() - before);
    r.statistics["params_updated"] = static_cast<double>(pairs.size() + muon_pairs.size());
    if (opt.kind == OptimizerKind::Muon) r.statistics["params_muon"] = static_cast<double>(muon_pairs.size());
    return r;
  });
}

}  // namespace kiln
