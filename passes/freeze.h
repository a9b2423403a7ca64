// Freezing parameters: choosing them by pattern, and the pass that removes
// the backward and optimizer work they no longer need.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "passes/pass.h"

namespace kiln {

/// Whether `--freeze PATTERN` selects the parameter `name` (a state_dict
/// key). A pattern with a wildcard (`*`, `?`, `[...]`) is an fnmatch glob
/// over the whole name (`*` also matches dots: `layer1.*.weight`); one
/// without is the name itself or a module prefix: `layer1` selects
/// `layer1.0.conv1.weight`, not `layer10.weight`.
bool freezePatternMatches(std::string_view pattern, std::string_view name);

/// The parameters (graph input names) `patterns` select among `params`
/// (the Param inputs' names). A tied parameter (`aliases`: extra state_dict
/// key -> the input that holds it) is frozen under any of its names, as
/// requires_grad=False on the one shared tensor. A pattern that selects
/// nothing is an error listing a few parameter names.
Result<std::set<std::string>> resolveFreezePatterns(const std::vector<std::string>& patterns,
                                                    const std::vector<std::string>& params,
                                                    const std::map<std::string, std::string>& aliases = {});

/// The freeze pass: for every parameter in ctx.training.frozen, removes its
/// Gradient output, its entries in the multi-tensor optimizer update (the
/// update node is rebuilt without them, and global-norm clipping no longer
/// counts their gradients), its ParamUpdate and OptStateUpdate outputs, the
/// OptState inputs nothing reads any more, and every node that only fed
/// them. Statistics: params_frozen, nodes_removed, flops_removed.
Result<PassResult> runFreeze(Graph& g, PassContext& ctx);

}  // namespace kiln
