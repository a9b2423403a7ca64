// Training checkpoints on disk. A checkpoint directory holds one
// subdirectory per saved step plus a `latest` file naming the newest:
//
//   DIR/step-00000100/model.safetensors      parameters + buffers (state_dict keys)
//   DIR/step-00000100/optimizer.safetensors  optimizer state (step, moments)
//   DIR/step-00000100/trainer.json           steps done, optimizer, loss, seed
//   DIR/latest                               "step-00000100"
//
// Saving writes the new step directory completely (files fsynced), then
// replaces `latest` atomically, then deletes older step directories: a crash
// at any point leaves `latest` naming a complete checkpoint.
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

Status writeCheckpoint(const std::string& dir, const Checkpoint& ckpt);
/// Reads DIR/latest's checkpoint; errors name the file that is missing or bad.
Result<Checkpoint> readCheckpoint(const std::string& dir);

}  // namespace kiln
