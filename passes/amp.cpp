// amp: automatic mixed precision as graph rewrites.
//
// Needs: a forward graph, normally with its loss (run after `loss` and
// before `autodiff`, so the loss op follows the policy and autodiff
// differentiates through the casts). fp16 loss scaling needs the Loss output.
// Does: casts inputs of the policy's Lower ops down to bf16/f16 and of its
// Fp32 ops up to f32 (passes/amp_policy.cpp), re-infers every output type in
// graph order, and casts graph outputs back to their original types. With
// fp16 loss scaling it adds the loss-scale state and metric; the optimizer
// pass calls addLossScaleUpdate for the rest of GradScaler.
// Guarantees: the graph's inputs and output types are unchanged (parameters
// stay f32 master weights); only `cast` nodes are added; each value is cast
// to a dtype at most once.
#include "passes/amp.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/op_table.h"
#include "passes/graph_constants.h"
#include "passes/amp_policy.h"

namespace kiln {
namespace {

constexpr const char* kScope = "amp";

Value* constant(Graph& g, double v, DType dt) {
  return scalarConstant(g, v, dt, kScope);
}

/// Casts a node's inputs for its policy category, reusing earlier casts.
class Caster {
 public:
  explicit Caster(Graph& g) : g_(g) {}

  /// Replace input `i` of `n` by `v` cast to `dt` (one cast per (v, dt)).
  void cast(Node* n, size_t i, DType dt) {
    Value* v = n->input(i);
    auto [it, fresh] = cache_.try_emplace({v, dt}, nullptr);
    if (fresh) {
      g_.setInsertPoint(n);
      it->second = g_.add("cast", {v}, {{"dtype", dt}}, n->scope(),
                          "amp: " + std::string(dtypeName(dt)) + " for " + n->describe());
      ++added;
    }
    n->replaceInput(i, it->second);
  }

  size_t added = 0;

 private:
  Graph& g_;
  std::map<std::pair<Value*, DType>, Value*> cache_;
};

/// Apply the policy to one node; returns its category when it acted.
std::optional<AmpCategory> applyPolicy(Node* n, DType low, Caster& caster) {
  const AmpPolicyEntry* entry = ampPolicyEntry(n->op());
  std::optional<AmpCategory> cat = entry ? std::optional(entry->category) : std::nullopt;
  if (!cat || *cat == AmpCategory::Promote) return std::nullopt;
  // torch.autocast: ops on f64 tensors are not eligible.
  for (Value* v : n->inputs())
    if (v->dtype() == DType::F64) return std::nullopt;
  const size_t cast_inputs = entry->cast_inputs < 0 ? n->numInputs() : static_cast<size_t>(entry->cast_inputs);
  for (size_t i = 0; i < std::min(n->numInputs(), cast_inputs); ++i) {
    DType t = n->input(i)->dtype();
    if (!isFloating(t)) continue;
    DType want = *cat == AmpCategory::Lower ? low : DType::F32;
    if (t == want || (*cat == AmpCategory::Fp32 && !isLowPrecisionFloat(t))) continue;
    caster.cast(n, i, want);
  }
  return cat;  // counted even when no cast was needed: it runs as the policy says
}

/// Output types after the inputs changed; throws (naming the node) when the
/// op rejects the new dtypes.
void reinfer(Node* n) {
  std::vector<TensorType> types = n->def().infer(*n);
  for (size_t i = 0; i < types.size() && i < n->numOutputs(); ++i)
    if (n->output(i)->type() != types[i]) n->output(i)->setType(types[i]);
}

/// The fp16 loss-scale state and this step's scale (a Metric output).
void addLossScale(Graph& g, const AmpOptions& amp) {
  Value* loss = nullptr;
  for (const GraphOutput& o : g.outputs())
    if (o.role == OutputRole::Loss) loss = o.value;
  if (!loss) fail("amp: fp16 loss scaling needs the loss: run amp after the loss pass (e.g. loss,amp,autodiff,...)");
  if (g.findInput(kLossScaleInput)) fail(std::string("amp: the graph already has an input '") + kLossScaleInput + "'");
  g.setInsertPoint(nullptr);
  Value* state = g.addInput(kLossScaleInput, {DType::F32, {}}, ValueRole::OptState);
  // 0 (fresh optimizer state) means the first step: start at init_scale.
  Value* fresh = g.add("eq", {state, constant(g, 0.0, DType::F32)}, {}, kScope);
  Value* scale = g.add("where", {fresh, constant(g, amp.init_scale, DType::F32), state}, {}, kScope);
  g.addOutput(scale, kLossScaleMetric, OutputRole::Metric);
}

}  // namespace

Result<PassResult> runAmp(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    const AmpOptions& amp = ctx.training.amp;
    if (amp.mode == AmpMode::None) return {};
    const DType low = ampDType(amp.mode);
    std::vector<TensorType> output_types;
    for (const GraphOutput& o : g.outputs()) output_types.push_back(o.value->type());

    std::vector<Node*> nodes;
    for (const auto& n : g.nodes()) nodes.push_back(n.get());
    Caster caster(g);
    double lowered = 0, kept_f32 = 0;
    for (Node* n : nodes) {
      if (auto cat = applyPolicy(n, low, caster)) (*cat == AmpCategory::Lower ? lowered : kept_f32) += 1;
      reinfer(n);
    }
    // The graph's interface stays: a model output that became low precision
    // is cast back (its BufferUpdate must match the buffer it replaces).
    g.setInsertPoint(nullptr);
    auto& outs = g.mutableOutputs();
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].value->dtype() != output_types[i].dtype) {
        outs[i].value = g.add("cast", {outs[i].value}, {{"dtype", output_types[i].dtype}}, kScope,
                              "amp: output " + outs[i].name + " keeps its dtype");
        ++caster.added;
      }
    if (amp.scalesLoss()) addLossScale(g, amp);

    PassResult r;
    r.changed = caster.added > 0 || amp.scalesLoss();
    r.statistics["casts_added"] = static_cast<double>(caster.added);
    r.statistics["ops_lowered"] = lowered;
    r.statistics["ops_kept_f32"] = kept_f32;
    return r;
  });
}

std::optional<LossScaleStep> addLossScaleUpdate(Graph& g, const std::vector<Value*>& grads, const AmpOptions& o) {
  Value* state = g.findInput(kLossScaleInput);
  if (!state) return std::nullopt;
  Value* scale = nullptr;
  for (const GraphOutput& out : g.outputs())
    if (out.role == OutputRole::Metric && out.name == kLossScaleMetric) scale = out.value;
  if (!scale) fail(std::string("optimizer: '") + kLossScaleInput + "' without the amp pass's loss_scale metric");
  if (g.findInput(kGrowthTrackerInput))
    fail(std::string("optimizer: the graph already has an input '") + kGrowthTrackerInput + "'");
  const DType f32 = DType::F32;
  // found_inf: the norm of all gradients is inf or NaN exactly when one
  // element is (GradScaler's _amp_foreach_non_finite_check_and_unscale_),
  // and the norm is one multi-tensor reduction that clipping shares (cse).
  Value* norm = g.add("global_norm", grads, {}, kScope);
  if (norm->dtype() != f32) norm = g.add("cast", {norm}, {{"dtype", f32}}, kScope);
  Value* inf = constant(g, INFINITY, f32);
  Value* found = g.add("logical_not", {g.add("lt", {norm, inf}, {}, kScope)}, {}, kScope);
  Value* zero = constant(g, 0.0, f32);
  Value* one = constant(g, 1.0, f32);
  // 1/scale (exact: the scale is a power of two), +inf when skipping, which
  // makes the update's grad_scale non-finite: the update is then a no-op.
  Value* inv = g.add("div", {one, g.add("where", {found, zero, scale}, {}, kScope)}, {}, kScope);

  // GradScaler.update(): on inf/NaN scale *= backoff and the tracker resets;
  // else the tracker counts, and at growth_interval scale *= growth (if
  // that stays finite) and the tracker resets.
  Value* tracker = g.addInput(kGrowthTrackerInput, {f32, {}}, ValueRole::OptState);
  Value* counted = g.add("add", {tracker, one}, {}, kScope);
  Value* grow = g.add("ge", {counted, constant(g, static_cast<double>(o.growth_interval), f32)}, {}, kScope);
  Value* grown = g.add("mul", {scale, constant(g, o.growth_factor, f32)}, {}, kScope);
  Value* grown_ok = g.add("where", {g.add("lt", {grown, inf}, {}, kScope), grown, scale}, {}, kScope);
  Value* backed_off = g.add("mul", {scale, constant(g, o.backoff_factor, f32)}, {}, kScope);
  Value* new_scale =
      g.add("where", {found, backed_off, g.add("where", {grow, grown_ok, scale}, {}, kScope)}, {}, kScope);
  Value* new_tracker = g.add("where", {g.add("logical_or", {found, grow}, {}, kScope), zero, counted}, {}, kScope);
  g.addOutput(new_scale, kLossScaleInput, OutputRole::OptStateUpdate);
  g.addOutput(new_tracker, kGrowthTrackerInput, OutputRole::OptStateUpdate);
  return LossScaleStep{found, inv};
}

}  // namespace kiln
