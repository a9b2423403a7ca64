// Test helper: text IR to a Graph; a syntax error fails the calling test
// (with the parser's message) and yields an empty graph instead of crashing.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/text_ir.h"

namespace kiln::test {

inline Graph parse(const std::string& text) {
  auto g = parseGraph(text, "test");
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : Graph();
}

}  // namespace kiln::test
