#include "passes/pass_registry.h"

#include "passes/amp.h"
#include "passes/autodiff.h"
#include "passes/channels_last.h"
#include "passes/cse.h"
#include "passes/data_parallel.h"
#include "passes/dce.h"
#include "passes/ema.h"
#include "passes/eval_mode.h"
#include "passes/fold.h"
#include "passes/fold_transposes.h"
#include "passes/freeze.h"
#include "passes/fuse.h"
#include "passes/fuse_attention.h"
#include "passes/loss.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"
#include "passes/remat.h"
#include "passes/schedule.h"
#include "passes/selective_backprop.h"
#include "passes/simplify.h"
#include "passes/sparse_updates.h"
#include "passes/split_updates.h"

namespace kiln {

const std::vector<PassInfo>& allPasses() {
  static const std::vector<PassInfo> table = {
      {"loss", "append the training loss to the forward graph",
       "Needs a forward graph and PassContext::training.loss. Appends cross_entropy or mse of output 0 against a "
       "new `target` data input (or takes output 0 as the loss for `model`) and marks it the Loss output.",
       runLoss},
      {"eval_mode", "the forward as after model.eval(): BatchNorm on running statistics, no dropout",
       "Run on the forward graph before loss (kiln train --eval-data builds its evaluation step with it). Every "
       "training-mode batch_norm that tracks running statistics normalizes with them and no longer updates them "
       "(its BufferUpdate outputs go); every training-mode dropout passes its input through. No state changes.",
       runEvalMode},
      {"selective_backprop", "forward on the whole batch, backward on its highest-loss examples",
       "Needs the loss pass on the forward traced at the selected rows and PassContext::training.selective (the "
       "forward at the whole batch; kiln train --selective-backprop imports the model at both sizes). The step "
       "scores every example with that forward, keeps the top k losses (a static topk), and runs the training "
       "forward, loss and so the backward on those k rows only. Does nothing without a fraction.",
       runSelectiveBackprop},
      {"fuse_attention", "matmul -> scale -> mask -> softmax -> matmul chains into one tiled attention kernel",
       "Run on the forward graph before amp and autodiff. Replaces each softmax(scale * q k^T [masked]) v chain "
       "whose intermediates have no other use by an attention node (core/ops/attention.h): the [L, S] scores "
       "exist only a tile at a time, causal masks (triu/tril of true) skip the upper triangle, head-split "
       "permutes are read in place, and the backward recomputes the scores. Chains with dropout on the "
       "probabilities or a parameter-dependent additive mask stay unfused. Same values within float rounding.",
       runFuseAttention},
      {"amp", "automatic mixed precision: bf16/fp16 compute with f32 master weights (torch.autocast)",
       "Needs PassContext::training.amp; run after loss and before autodiff. Casts the inputs of matmul/linear/conv2d "
       "to bf16/f16 and those of softmax, norms, reductions, losses and exp/log to f32 (passes/amp_policy.cpp), "
       "re-infers the types in between; parameters and graph outputs keep their types. fp16 adds the loss-scale "
       "state that autodiff seeds the backward with and the optimizer unscales and updates (sync-free).",
       runAmp},
      {"autodiff", "reverse-mode gradients of the loss for every trainable parameter",
       "Needs a Loss output. Appends the backward from each op's gradient rule, only for values on a path "
       "from a trainable parameter to the loss; fan-out is summed, tied parameters get one summed gradient. "
       "Adds one Gradient output per trainable parameter.",
       runAutodiff},
      {"data_parallel", "allreduce the gradients in buckets (sparse for embeddings), average the loss over ranks",
       "Needs Gradient outputs (after autodiff, before the optimizer) and PassContext::training.data_parallel. "
       "With more than one rank: buckets of gradients in the order backward produces them, one allreduce each "
       "right after its last gradient; embedding and --sparse-grads gradients block-sparse; the loss averaged "
       "and buffer updates broadcast from rank 0. One rank: no change.",
       runDataParallel},
      {"optimizer", "the optimizer update over all parameters at once",
       "Needs Gradient outputs. Appends one multi-tensor SGD / Adam / AdamW update (optional global-norm "
       "clipping), with optimizer state as graph inputs and outputs, and the lr and step scalars as inputs. Muon: "
       "per hidden matrix (2-D, no embedding reads it) momentum, 5 Newton-Schulz rounds in bf16 and the scaled "
       "step as graph ops, at the muon_lr scalar; AdamW for the other parameters.",
       runOptimizer},
      {"freeze", "remove the gradients, updates and optimizer state of frozen parameters",
       "Needs autodiff (and usually the optimizer) to have run, and PassContext::training.frozen. Drops the frozen "
       "parameters' Gradient outputs and their entries in the multi-tensor update and in gradient clipping, their "
       "ParamUpdate / OptStateUpdate outputs and OptState inputs, and every node that only fed them.",
       runFreeze},
      {"ema", "an exponential moving average of the weights as optimizer state (--ema DECAY)",
       "Needs the optimizer and freeze; does nothing without PassContext::training.ema_decay. Per parameter, an "
       "OptState ema.P updated after the step as torch.optim.swa_utils.AveragedModel's EMA does: a copy of the "
       "weights at the first step, then decay * ema + (1 - decay) * weights. kiln train evaluates and saves them "
       "on request.",
       runEma},
      {"cse", "common-subexpression elimination",
       "Merges nodes with the same op, input values, explicit attributes and output types (random and "
       "side-effecting ops excepted); the first one stays. Results are bit for bit the same.",
       runCse},
      {"dce", "dead-code elimination",
       "Removes every node none of whose outputs is used or a graph output (side-effecting ops stay). "
       "Graph inputs are kept: they are the model's state.",
       runDce},
      {"fold", "constant folding of splat constants",
       "Replaces a node whose inputs are all `full` constants by a `full` when the result is exact without a "
       "kernel: +, -, *, /, sqrt, neg, abs, relu, max/min, comparisons, where, cast and layout ops; never "
       "transcendental ops or reductions. Bit for bit the same values.",
       runFold},
      {"simplify", "algebraic rules and constant folding to a fixed point, then cse and dce",
       "Runs the rule table of passes/algebraic_rules.cpp (permute of permute, reshape chains, x * 1, x + 0, "
       "...) and fold until nothing changes, then cse and dce. Same values (bit for bit except -0.0 where a "
       "rule says so); statistics per rule.",
       runSimplify},
      {"channels_last", "convolution chains on NHWC tensors, without per-call layout reorders",
       "Run after simplify on a target whose convolutions take channels_last (PassContext::cpu_only_ops). Every "
       "4-D conv2d and conv backward op becomes its channels_last form between NCHW <-> NHWC permutes; a "
       "batch_norm (or backward) of such a permute normalizes the NHWC rows; then permute pairs cancel and "
       "permutes move below elementwise ops and into sums, to a fixed point, so only the transposes at the "
       "NCHW edges stay. Same values within float rounding.",
       runChannelsLast},
      {"fold_transposes", "matmul of a transposed operand into one gemm that reads it transposed",
       "Run after simplify (permute pairs already cancelled). A matmul of matrices or a gemm whose operand is a "
       "permute swapping the last two dims becomes gemm(a, b) {trans_a, trans_b} on the permute's input, so "
       "BLAS / oneDNN / cuBLAS read it transposed instead of a copy being made (every linear's weight gradient "
       "g^T x). Same values within float rounding.",
       runFoldTransposes},
      {"fuse", "elementwise chains (and a sum/mean ending one) into one fused kernel each",
       "Groups fusible elementwise nodes (passes/fuse.h) with one loop shape and one float dtype, operands of "
       "that shape, scalars or broadcast runs, into fused_elementwise nodes whose body is the chain as text IR; "
       "a sum or mean of a group value ends its loop (fused_reduction); relu(linear) becomes a GEMM epilogue. "
       "Intermediates used only inside a group are never written to memory. Run after autodiff. Bit for bit "
       "the same values.",
       runFuse},
      {"split_updates", "one optimizer update per parameter, so each runs right after its gradient",
       "Needs the optimizer. Replaces a multi-tensor sgd_update / adam_update by one node per parameter when its "
       "scalars (lr, step, gradient scale) do not depend on the gradients (no clipping, no fp16 loss scaling); "
       "schedule then frees each gradient as soon as it is applied. Bit for bit the same values.",
       runSplitUpdates},
      {"sparse_updates", "SGD updates only the rows a row-sparse (embedding) gradient lists",
       "Needs the optimizer. In an sgd_update without momentum and weight decay, a parameter whose gradient is "
       "rows_to_dense(rows, values) (data_parallel's row-sparse embedding gradient) gets sgd_update_rows: the "
       "rows the batch touched are updated in place, the rest of the table is not touched, and the dense "
       "gradient goes unless something else reads it. Bit for bit the same values.",
       runSparseUpdates},
      {"schedule", "order the step for a low memory peak (frees as early as possible)",
       "List scheduling over the data dependences: the ready node that frees the most runs first, else the one "
       "earliest in the current order; an update that can write over its state waits for that state's other "
       "readers. Kept only if the estimated peak (updates in place) goes down. Same nodes, same values.",
       runSchedule},
      {"remat", "recompute activations in the backward until the peak fits --memory-budget",
       "Needs the final order (after schedule) and PassContext::training.memory_budget (nothing to do without one). "
       "At the peak, an activation kept for the backward is computed again right before its next reader, with the "
       "producers it needs, best bytes-per-flop first, kept only if the peak goes down; a clear error with the "
       "smallest peak reached when the budget cannot be met. Bit for bit the same values.",
       runRemat},
      {"memory_plan", "analysis: the arena offsets of every intermediate and the memory timeline",
       "Plans the graph in its order (passes/memory_plan.h): liveness, greedy-by-size offsets in one arena, "
       "views sharing their source, updates in place. Does not change the graph; reports arena_bytes, "
       "arena_lower_bound, peak_bytes and unshared_bytes. Executors plan again with their own kernels' views.",
       runMemoryPlan},
  };
  return table;
}

const PassInfo* findPass(std::string_view name) {
  for (const PassInfo& p : allPasses())
    if (name == p.name) return &p;
  return nullptr;
}

std::string knownPassNames() {
  std::string out;
  for (const PassInfo& p : allPasses()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

}  // namespace kiln
