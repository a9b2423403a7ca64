#include "core/graphviz/render.h"

#include <graphviz/gvc.h>

#include <cstdio>
#include <memory>
#include <mutex>

namespace kiln {
namespace {

// Graphviz keeps global state (its error buffer, the context's plugins):
// one rendering at a time in a process.
std::mutex& graphvizMutex() {
  static std::mutex m;
  return m;
}

// Graphviz reports errors through a callback; keep the last lines.
std::string& lastErrors() {
  static std::string s;
  return s;
}

int collectError(char* message) {
  lastErrors() += message;
  return 0;
}

}  // namespace

Result<std::string> renderDot(const std::string& dot, const std::string& format) {
  std::lock_guard<std::mutex> lock(graphvizMutex());
  lastErrors().clear();
  agseterrf(collectError);
  std::unique_ptr<GVC_t, int (*)(GVC_t*)> gvc(gvContext(), gvFreeContext);
  if (!gvc) return Error{"graphviz: cannot create a context"};
  std::unique_ptr<Agraph_t, int (*)(Agraph_t*)> g(agmemread(dot.c_str()), agclose);
  auto fail = [&](const std::string& what) {
    std::string why = lastErrors();
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return Error{"graphviz: " + what + (why.empty() ? "" : ": " + why)};
  };
  if (!g) return fail("cannot parse the DOT text");
  if (gvLayout(gvc.get(), g.get(), "dot") != 0) return fail("layout failed");
  char* data = nullptr;
  unsigned int length = 0;
  const int rc = gvRenderData(gvc.get(), g.get(), format.c_str(), &data, &length);
  std::string out = rc == 0 && data ? std::string(data, length) : std::string();
  if (data) gvFreeRenderData(data);
  gvFreeLayout(gvc.get(), g.get());
  if (rc != 0) return fail("cannot render format '" + format + "'");
  return out;
}

}  // namespace kiln
