// Source paths in what the report says about nodes ("reshape
// (/home/ana/proj/models/zoo.py:200)"), shown relative to the project that
// exported the model: the deepest directory all of a report's paths share.
// The views show the short form and keep the full one in a tooltip.
#pragma once

#include <string>
#include <vector>

namespace kiln::driver {

/// The deepest directory ("/home/ana/proj/models/") that every absolute
/// path in `texts` lies in, with its trailing '/'; "" when they share none
/// but the root, or hold no path.
std::string commonSourceDir(const std::vector<std::string>& texts);

/// `text` with every absolute path under `dir` written relative to it.
std::string relativeToDir(const std::string& text, const std::string& dir);

}  // namespace kiln::driver
