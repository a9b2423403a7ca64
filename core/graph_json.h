// JSON serialization of a graph (schema "kiln-graph", version 1). Floats that
// JSON cannot hold (inf, nan) are written as strings. Values are referred to
// by id. Reading validates every reference and re-checks types with the
// verifier's rules at the caller's choice.
//
// {"format": "kiln-graph", "version": 1, "name": "main",
//  "inputs":  [{"id": 0, "name": "input0", "role": "data", "type": "f32[2,3]"}],
//  "nodes":   [{"op": "relu", "inputs": [0], "outputs": [{"id": 1, "type": "f32[2,3]"}],
//               "attrs": {"dim": {"int": 1}}, "scope": "fc", "provenance": "m.py:3"}],
//  "outputs": [{"id": 1, "name": "output0", "role": "output"}]}
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/ir.h"
#include "core/result.h"

namespace kiln {

nlohmann::json graphToJson(const Graph& g);
Result<Graph> graphFromJson(const nlohmann::json& j, const std::string& where = "<json>");
/// Text helpers: pretty-printed JSON and parsing from text.
std::string graphToJsonText(const Graph& g);
Result<Graph> graphFromJsonText(const std::string& text, const std::string& where = "<json>");
/// Parse a type string like "f32[2,3]".
Result<TensorType> parseTensorType(const std::string& s);

}  // namespace kiln
