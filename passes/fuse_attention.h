// The fuse_attention pass: matmul -> scale -> mask -> softmax -> matmul
// chains become one `attention` node (core/ops/attention.h).
#pragma once

#include "passes/pass.h"

namespace kiln {

/// The fuse_attention pass (see passes/fuse_attention.cpp). Statistics:
/// fused (chains replaced), causal (masks recognized as causal),
/// tokens_outer (fusions that read the head split's layout directly),
/// score_bytes (bytes of [.., L, S] tensors no longer materialized per
/// forward). Does nothing when PassContext::cpu_only_ops is false.
Result<PassResult> runFuseAttention(Graph& g, PassContext& ctx);

}  // namespace kiln
