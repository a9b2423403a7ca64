// TorchScript importer (needs libtorch; the only code that includes it).
#pragma once

#include <string>

#include "core/import/import_options.h"
#include "core/model.h"
#include "core/result.h"

namespace kiln {

/// Import a torch.jit.trace / torch.jit.script archive.
///
/// Graph inputs: data inputs `input0`, `input1`, ... (forward's arguments
/// after self) typed by `options.input_types`, or by the archive's
/// `kiln_inputs.json` extra file (`[{"dtype": "f32", "shape": [1, 3, 64, 64]}]`)
/// when those are empty; then the parameters (role Param) and buffers (role
/// Buffer) the forward uses, named by their state_dict keys, in state_dict
/// order; then constants (`__const.N`, role Const). `Model::weights` holds
/// every state_dict tensor; a tensor reachable under several keys (tied
/// weights) is one input under its first key, the others are
/// `Model::aliases`.
///
/// Outputs: the forward's tensors, tuples and lists flattened in order, named
/// output0, output1, ...; then one BufferUpdate output per buffer the forward
/// wrote, named by its key (BatchNorm running_mean / running_var /
/// num_batches_tracked in training mode).
///
/// Training mode: the graph mirrors the archive. A trace records the mode it
/// was made in (aten::batch_norm's `training` argument, dropout's `train`),
/// and a scripted module's `training` attributes are read as saved, so an
/// archive saved in train mode imports with batch statistics, running-stat
/// updates and active dropout even when `options.training` is false, and an
/// eval-mode archive imports in eval mode when it is true. Re-export in the
/// other mode to change it.
///
/// Errors are one line starting with `path: ` and name the TorchScript op,
/// its source location and module scope.
Result<Model> importTorchScript(const std::string& path, const ImportOptions& options = {});

}  // namespace kiln
