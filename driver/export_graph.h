// A graph written out in the formats `kiln export` offers: the text IR,
// JSON, Graphviz DOT, SVG, and fx (a Python file that rebuilds it as a
// torch.fx GraphModule). kiln export and the Python module's Step.export
// share it.
#pragma once

#include <string>

#include "core/ir.h"
#include "core/result.h"
#include "core/tensor.h"
#include "driver/model_args.h"

namespace kiln::driver {

/// `g` as text in `format` (json, text, dot, svg or fx); an fx file carries
/// `consts` (the trace's constants).
Result<std::string> formatGraph(const Graph& g, const std::string& format, const TensorMap& consts);

/// Write the compiled step `g` of `model` to `path` in `format`,
/// atomically; an fx file whose graph has constant inputs reads them from
/// the model (a compiled step keeps no copy of them).
Status exportStepGraph(const Graph& g, const ModelArgs& model, const std::string& format, const std::string& path);

}  // namespace kiln::driver
