// The algebraic rewrite rules of the simplify pass, kept as data: a table of
// small pattern -> replacement entries, each with a name and a one-line
// reason why it is valid.
#pragma once

#include <vector>

#include "core/ir.h"

namespace kiln {

/// One rewrite rule. It matches a single-output node of op `op` (and
/// whatever it checks of the node's producers) and gives the value that
/// replaces the node's output.
struct AlgebraicRule {
  const char* name;  ///< short snake_case name; simplify reports hits as "rule.<name>"
  const char* why;   ///< one line: why the rewrite is valid, and how exact it is
  const char* op;    ///< the op of the node the pattern is rooted at; "*": any op (the rule checks)
  /// Match at `n` (whose op is `op`). On a match, return the replacement: an
  /// existing value or one computed by new nodes inserted before `n` (the
  /// caller sets the insertion point). Its type must equal n's output type.
  /// nullptr: no match. Must not erase or modify existing nodes.
  Value* (*rewrite)(Graph& g, Node& n);
};

/// Every rule, in the order simplify tries them on a node.
const std::vector<AlgebraicRule>& algebraicRules();

}  // namespace kiln
