// Training checkpoints on disk. A checkpoint directory holds one
// subdirectory per saved step plus a `latest` file naming the newest:
//
//   DIR/step-00000100/model.safetensors      parameters + buffers (state_dict keys)
//   DIR/step-00000100/optimizer.safetensors  optimizer state (step, moments)
//   DIR/step-00000100/trainer.json           steps done, optimizer, loss, seed
//   DIR/latest                               "step-00000100"
//
// Saving writes the new step directory under a temporary name (files and
// directory fsynced; a failed sync is an error), renames it into place
// under a name no directory has (the same step saved again becomes
// step-00000100-r1), replaces `latest` atomically, and only then deletes
// the oldest complete checkpoints beyond the number to keep. A crash at
// any point leaves `latest` naming a complete checkpoint; another writer's
// temporary directories are never touched.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "core/tensor.h"

namespace kiln {

struct Checkpoint {
  TensorMap model;
  TensorMap optimizer;
  nlohmann::json trainer;  ///< must hold "steps_done"
};

/// Save `ckpt` in `dir` and keep the newest `keep` (>= 1) checkpoints there.
Status writeCheckpoint(const std::string& dir, const Checkpoint& ckpt, int keep = 1);
/// The step directory DIR/latest names ("step-00000100"); an error when
/// there is none or it names something else.
Result<std::string> latestCheckpoint(const std::string& dir);
/// The steps done of DIR/latest's checkpoint, from its trainer.json alone
/// (which step to compile for before the weights are read).
Result<int64_t> checkpointStepsDone(const std::string& dir);
/// Reads DIR/latest's checkpoint; errors name the file that is missing or bad.
Result<Checkpoint> readCheckpoint(const std::string& dir);

/// A checkpoint's files as bytes: what rank 0 of a data-parallel run reads
/// and sends to ranks that cannot see its file system.
struct CheckpointFiles {
  std::string step_dir;  ///< DIR/step-N, for error messages
  std::string model, optimizer, trainer;
};
Result<CheckpointFiles> readCheckpointFiles(const std::string& dir);
/// The checkpoint in `files`; errors name step_dir's files.
Result<Checkpoint> parseCheckpoint(const CheckpointFiles& files);

}  // namespace kiln
