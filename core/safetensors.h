// safetensors reader and writer (https://github.com/huggingface/safetensors
// format: 8-byte little-endian header length, JSON header, raw data).
// The reader validates everything a hostile file could lie about (header
// length, dtype, shape, offsets, overlaps, total size) before allocating.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "core/result.h"
#include "core/tensor.h"

namespace kiln {

/// Parsed file: tensors plus the optional "__metadata__" string map.
struct SafetensorsFile {
  TensorMap tensors;
  std::map<std::string, std::string> metadata;
};

/// Parse an in-memory safetensors image. `where` names the source in errors.
Result<SafetensorsFile> parseSafetensors(std::span<const uint8_t> bytes, const std::string& where);
/// Read and parse a file.
Result<SafetensorsFile> readSafetensors(const std::string& path);
/// Serialize to bytes (tensors in key order, 8-byte aligned data).
std::string serializeSafetensors(const TensorMap& tensors, const std::map<std::string, std::string>& metadata = {});
/// Write atomically: a temporary file in the same directory, then rename.
/// Nothing is left behind on failure.
Status writeSafetensors(const std::string& path, const TensorMap& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln
