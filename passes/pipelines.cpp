#include "passes/pipelines.h"

namespace kiln {

const std::vector<PipelineEntry>& trainingPipeline(TrainingGraphKind kind) {
  static const std::vector<PipelineEntry> step = {
      {"loss", "defines the scalar that autodiff differentiates"},
      {"selective_backprop", "after loss (it scores examples with it), before every pass that rewrites the forward"},
      {"fuse_attention", "before amp (attention takes its low-precision policy) and autodiff (its own gradient rule)"},
      {"amp", "after loss so the loss follows the policy; before autodiff so the backward goes through the casts"},
      {"autodiff", "its Gradient outputs are what the optimizer consumes"},
      {"data_parallel", "between autodiff and optimizer: the optimizer (and clipping) sees the ranks' mean gradients"},
      {"optimizer", "turns the gradients into parameter and optimizer-state updates"},
      {"freeze", "after the optimizer: drops a frozen parameter's gradient, update and state in one place"},
      {"ema", "after the optimizer and freeze: averages each parameter as this step leaves it"},
      {"simplify", "after all that emit nodes, before fuse: rules, folding, then cse and dce (subsumes them)"},
      {"channels_last", "after simplify, before fuse: convolution chains go NHWC, and their elementwise ops with them"},
      {"fold_transposes", "after simplify has cancelled permute pairs: the transposes left go into gemm flags"},
      {"fuse", "after everything that rewrites single ops: turns the final elementwise chains into fused kernels"},
      {"split_updates", "after the last pass that edits the update's inputs (freeze, simplify)"},
      {"sparse_updates", "after split_updates: takes row-sparse gradients' parameters out of the SGD update"},
      {"schedule", "once the node set is final: only the order changes from here on"},
      {"remat", "after schedule, on the order that runs: recomputes activations only if --memory-budget needs it"},
      {"memory_plan", "last: plans the order that runs (analysis only)"},
  };
  static const std::vector<PipelineEntry> gradients = {
      {"loss", "defines the scalar that autodiff differentiates"},
      {"fuse_attention", "before amp (attention takes its low-precision policy) and autodiff (its own gradient rule)"},
      {"amp", "after loss so the loss follows the policy; before autodiff so the backward goes through the casts"},
      {"autodiff", "the Gradient outputs are the result (kiln grad)"},
      {"data_parallel", "after autodiff: the Gradient outputs become the ranks' mean gradients"},
      {"freeze", "after autodiff: drops the frozen parameters' gradients and the backward only they need"},
      {"simplify", "after all that emit nodes, before fuse: rules, folding, then cse and dce (subsumes them)"},
      {"channels_last", "after simplify, before fuse: convolution chains go NHWC, and their elementwise ops with them"},
      {"fold_transposes", "after simplify has cancelled permute pairs: the transposes left go into gemm flags"},
      {"fuse", "after everything that rewrites single ops: turns the final elementwise chains into fused kernels"},
      {"schedule", "once the node set is final: only the order changes from here on"},
      {"remat", "after schedule, on the order that runs: recomputes activations only if --memory-budget needs it"},
      {"memory_plan", "last: plans the order that runs (analysis only)"},
  };
  static const std::vector<PipelineEntry> eval = {
      {"eval_mode", "first: the forward as after model.eval() (running statistics, no dropout)"},
      {"loss", "the held-out loss and accuracy, as the training step computes them"},
      {"fuse_attention", "before amp, as in the training step"},
      {"amp", "evaluates in the precision the model trains in"},
      {"simplify", "after all that emit nodes, before fuse: rules, folding, then cse and dce (subsumes them)"},
      {"channels_last", "after simplify, before fuse: convolution chains go NHWC"},
      {"fold_transposes", "after simplify has cancelled permute pairs: the transposes left go into gemm flags"},
      {"fuse", "after everything that rewrites single ops: elementwise chains into fused kernels"},
      {"schedule", "once the node set is final: only the order changes from here on"},
      {"memory_plan", "last: plans the order that runs (analysis only)"},
  };
  switch (kind) {
    case TrainingGraphKind::Step: return step;
    case TrainingGraphKind::Gradients: return gradients;
    case TrainingGraphKind::Eval: return eval;
  }
  return step;
}

std::vector<std::string> passNames(const std::vector<PipelineEntry>& pipeline) {
  std::vector<std::string> out;
  for (const PipelineEntry& e : pipeline) out.push_back(e.pass);
  return out;
}

}  // namespace kiln
