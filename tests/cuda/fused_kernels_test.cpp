// The NVRTC fused kernels (backend/cuda/kernels_fused.cpp, fused_codegen.h,
// nvrtc_compiler.h).
//
// Without a GPU (NVRTC compiles without one): for every op the fuse pass
// may put in a body (fusibleOps(), every unary_backward fn), a chain holding
// it is fused by the real fuse pass, in f32 and f64, with in-place, splat,
// broadcast and bool operands (in place and broadcast), a constant copied
// into the body, and a bool output; its source is generated and compiled
// for sm_90 and sm_80. The same for fused reductions (sum and mean over the
// innermost dims, outer dims, all dims, several runs), and the 64-bit index
// forms. A malformed source fails with NVRTC's log; the on-disk cache
// writes one file, reads it back, and rebuilds a truncated or corrupt one.
//
// On a GPU (skipped visibly without one): the same nodes against the CPU's
// fused kernels through expectMatchesCpu.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/fused_codegen.h"
#include "backend/cuda/nvrtc_compiler.h"
#include "core/text_ir.h"
#include "passes/fuse.h"
#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

namespace fs = std::filesystem;

// ---- helpers -----------------------------------------------------------------

/// KILN_CACHE_DIR pointed at a fresh directory for the test's life, so the
/// compilations are real and nothing lands in the user's cache.
class TempCacheDir {
 public:
  TempCacheDir() {
    static int counter = 0;
    dir_ =
        fs::temp_directory_path() / ("kiln-nvrtc-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    if (const char* old = std::getenv("KILN_CACHE_DIR")) old_ = old;
    ::setenv("KILN_CACHE_DIR", dir_.c_str(), 1);
    clearNvrtcMemoryCache();
  }
  ~TempCacheDir() {
    if (old_)
      ::setenv("KILN_CACHE_DIR", old_->c_str(), 1);
    else
      ::unsetenv("KILN_CACHE_DIR");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TempCacheDir(const TempCacheDir&) = delete;
  TempCacheDir& operator=(const TempCacheDir&) = delete;
  fs::path nvrtcDir() const { return dir_ / "nvrtc"; }
  /// The regular files under nvrtc/ (cache entries and failed sources).
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(nvrtcDir(), ec))
      if (e.is_regular_file()) out.push_back(e.path());
    return out;
  }

 private:
  fs::path dir_;
  std::optional<std::string> old_;
};

/// unary_backward's fns (core/ops/elementwise_grad.cpp kUnaryGradFns).
const std::vector<std::string>& gradFns() {
  static const std::vector<std::string> fns = {
      "abs",        "expm1",     "clamp",       "hardtanh", "log1p",      "sqrt", "rsqrt",
      "reciprocal", "sin",       "cos",         "tanh",     "sigmoid",    "erf",  "silu",
      "mish",       "hardswish", "hardsigmoid", "gelu",     "leaky_relu", "elu",  "softplus"};
  return fns;
}

/// One op (or unary_backward fn) to put in a chain.
struct OpCase {
  std::string op, fn, approximate;
  std::string label() const {
    std::string s = op;
    if (!fn.empty()) s += " fn=" + fn;
    if (!approximate.empty()) s += " approximate=" + approximate;
    return s;
  }
  bool compares() const { return op == "lt" || op == "le" || op == "gt" || op == "ge" || op == "eq" || op == "ne"; }
  /// Whether its argument must be positive (log, sqrt; gradients reading sqrt/rsqrt's output).
  bool positive() const {
    return op == "log" || op == "sqrt" || op == "rsqrt" || fn == "sqrt" || fn == "rsqrt" || fn == "reciprocal";
  }
  /// Whether CUDA's libm (not a formula Kiln writes out) decides the result.
  bool libm() const {
    static const std::set<std::string> ops = {"log", "erf"};
    static const std::set<std::string> fns = {"log1p", "sin", "cos", "erf", "mish"};
    return ops.count(op) || fns.count(fn) || approximate == "none";
  }
};

std::vector<OpCase> opCases() {
  std::vector<OpCase> cases;
  for (const Op kind : fusibleOps()) {
    const std::string op(opName(kind));
    if (op == "unary_backward") {
      for (const std::string& fn : gradFns()) cases.push_back({op, fn, fn == "gelu" ? "tanh" : ""});
      cases.push_back({op, "gelu", "none"});
    } else if (op == "gelu") {
      cases.push_back({op, "", "tanh"});
      cases.push_back({op, "", "none"});
    } else {
      cases.push_back({op, "", ""});
    }
  }
  return cases;
}

/// The node text of the case applied to %a, %b (%e = exp(%a) where it must
/// be positive; %m for where's condition).
std::string opCall(const OpCase& c) {
  const std::string x = c.positive() ? "%e" : "%a";
  if (c.op == "unary_backward") {
    std::string attrs = "fn=\"" + c.fn + "\"";
    if (c.fn == "gelu") attrs += ", approximate=\"" + c.approximate + "\"";
    if (c.fn == "clamp") attrs += ", min=-0.5";  // max stays +inf: a non-finite constant
    if (c.fn == "hardtanh") attrs += ", min_val=-0.5, max_val=0.75";
    if (c.fn == "leaky_relu") attrs += ", negative_slope=0.1";
    if (c.fn == "elu") attrs += ", alpha=1.5";
    if (c.fn == "softplus") attrs += ", beta=2.0, threshold=1.5";
    return "unary_backward(%b, " + x + ") {" + attrs + "}";
  }
  if (c.op == "where") return "where(%m, %a, %b)";
  if (c.op == "gelu") return "gelu(%a) {approximate=\"" + c.approximate + "\"}";
  if (c.op == "leaky_relu") return "leaky_relu(%a) {negative_slope=0.1}";
  if (c.op == "hardtanh") return "hardtanh(%a) {min_val=-0.5, max_val=0.75}";
  if (c.op == "clamp") return "clamp(%a) {min=-0.5}";
  static const std::set<std::string> binary = {"add", "sub", "mul", "div", "lt", "le", "gt", "ge", "eq", "ne"};
  return binary.count(c.op) ? c.op + "(%a, %b)" : c.op + "(" + x + ")";
}

std::string dims(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

/// A chain around the case that the fuse pass makes one fused_elementwise
/// node of: x in place, bias broadcast, s a splat, 0.5 a constant copied
/// into the body, m an in-place bool, mb a broadcast bool; outputs the end,
/// an intermediate and (for comparisons) a bool.
std::string chainGraph(const OpCase& c, const char* t, const Shape& shape) {
  const std::string ty = std::string(t) + dims(shape), bt = "bool" + dims(shape);
  const Shape last{shape.back()};
  std::string s = "graph g(%x: " + ty + " data, %y: " + ty + " data, %bias: " + t + dims(last) + " data, %s: " + t +
                  "[] data, %m: " + bt + " data, %mb: bool" + dims(last) + " data) {\n";
  s += "  %h = full() {dtype=" + std::string(t) + ", shape=[], value=0.5} : " + t + "[]\n";
  s += "  %a0 = add(%x, %bias) : " + ty + "\n";
  s += "  %a1 = mul(%a0, %s) : " + ty + "\n";
  s += "  %a = sub(%a1, %h) : " + ty + "\n";
  s += "  %b = add(%y, %a0) : " + ty + "\n";
  if (c.positive()) s += "  %e = exp(%a) : " + ty + "\n";
  if (c.op == "cast") {  // there and back: f32 -> bf16 -> f32, bf16 -> f32 -> bf16 (f64: to itself)
    const std::string other = std::string(t) == "f32" ? "bf16" : std::string(t) == "bf16" ? "f32" : t;
    s += "  %r0 = cast(%a) {dtype=" + other + "} : " + other + dims(shape) + "\n";
    s += "  %r = cast(%r0) {dtype=" + std::string(t) + "} : " + ty + "\n";
  } else {
    s += "  %r = " + opCall(c) + " : " + (c.compares() ? bt : ty) + "\n";
  }
  std::string r = "%r";
  if (c.compares()) {
    s += "  %q = where(%r, %a, %b) : " + ty + "\n";
    r = "%q";
  }
  s += "  %w = where(%m, " + r + ", %b) : " + ty + "\n";
  s += "  %w2 = where(%mb, %w, %a) : " + ty + "\n";
  s += "  %o = tanh(%w2) : " + ty + "\n";
  // Returned in the fused node's output order (its body's nodes' order), so
  // the one-node graph's outputs line up with the node's (expectMatchesCpu).
  s += "  return " + std::string(c.compares() ? "%r \"mask\", " : "") + "%w \"mid\", %o \"out\"\n}\n";
  return s;
}

/// A chain ending in a sum or mean over `dims`, with a broadcast bias, a
/// bool operand, a constant, and an intermediate and a bool also returned.
std::string reductionGraph(const char* t, const Shape& shape, const std::string& op, const std::string& axes,
                           bool keepdim, const Shape& reduced) {
  const std::string ty = std::string(t) + dims(shape), bt = "bool" + dims(shape);
  std::string s = "graph g(%x: " + ty + " data, %g: " + ty + " data, %b: " + t + dims({shape.back()}) +
                  " data, %m: " + bt + " data) {\n";
  s += "  %z = full() {dtype=" + std::string(t) + ", shape=[], value=0.0} : " + t + "[]\n";
  s += "  %0 = add(%x, %b) : " + ty + "\n";
  s += "  %1 = tanh(%0) : " + ty + "\n";
  s += "  %2 = mul(%1, %g) : " + ty + "\n";
  s += "  %3 = where(%m, %2, %z) : " + ty + "\n";
  s += "  %c = gt(%1, %z) : " + bt + "\n";
  s += "  %4 = " + op + "(%3) {dims=" + axes + ", keepdim=" + (keepdim ? "1" : "0") + "} : " + t + dims(reduced) + "\n";
  s += "  return %4 \"r\", %1 \"t\", %c \"c\"\n}\n";
  return s;
}

/// The graph after the fuse pass, which must have left exactly one node of `op`.
Graph fused(const std::string& text, const std::string& op) {
  auto g = parseGraph(text, "test");
  EXPECT_TRUE(g) << (g ? "" : g.error().message) << "\n" << text;
  if (!g) return Graph();
  PassContext ctx;
  auto r = runFuse(*g, ctx);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  EXPECT_EQ(g->numNodes(), 1u) << printGraph(*g);
  if (g->numNodes() == 1) {
    const Node& n = *g->nodes().front();
    EXPECT_EQ(n.op(), op) << printGraph(*g);
    // expectMatchesCpu compares the graph's outputs with the node's in order.
    EXPECT_EQ(g->outputs().size(), n.numOutputs()) << printGraph(*g);
    for (size_t i = 0; i < std::min(g->outputs().size(), n.numOutputs()); ++i)
      EXPECT_EQ(g->outputs()[i].value, n.output(i)) << "graph output " << i << " is not node output " << i;
  }
  return std::move(*g);
}

/// Compiles the node's source for each arch; EXPECTs success.
void expectCompiles(const Node& n, const FusedLayout& l, const std::string& label) {
  const std::string src = fusedKernelSource(n, l);
  EXPECT_EQ(src.find("#include"), std::string::npos) << label;
  for (int arch : {90, 80}) {
    auto img = compileCudaSource(src, arch, label);
    ASSERT_TRUE(img) << label << " sm_" << arch << ":\n" << img.error().message;
    EXPECT_FALSE((*img)->ptx);
    EXPECT_EQ((*img)->arch, arch);
    EXPECT_EQ((*img)->image.compare(0, 4,
                                    "\x7f"
                                    "ELF"),
              0)
        << label << ": not a CUBIN";
  }
}

int countAccess(const FusedLayout& l, OperandKind::Access a, bool is_bool) {
  int n = 0;
  for (const OperandKind& k : l.operands) n += k.access == a && (k.dtype == DType::Bool) == is_bool;
  return n;
}

// ---- without a GPU: generation and compilation ---------------------------------

TEST(FusedNvrtc, EveryFusibleOpCompilesForSm90AndSm80) {
  TempCacheDir cache;
  const auto before = nvrtcCounters();
  int nodes = 0;
  for (const OpCase& c : opCases()) {
    for (const char* t : {"f32", "f64", "bf16"}) {
      const std::string label = c.label() + " " + t;
      SCOPED_TRACE(label);
      Graph g = fused(chainGraph(c, t, {4, 6}), "fused_elementwise");
      ASSERT_EQ(g.numNodes(), 1u);
      const Node& n = *g.nodes().front();
      const std::string body = attrToString(*n.attr("body"));
      EXPECT_NE(body.find(" = " + c.op + "("), std::string::npos) << body;
      if (!c.fn.empty()) {
        EXPECT_NE(body.find("fn=\"" + c.fn + "\""), std::string::npos) << body;
      }
      const FusedLayout l = analyzeFused(n);
      EXPECT_FALSE(l.reduction);
      EXPECT_FALSE(l.wide_index);
      EXPECT_EQ(l.compute, std::string(t) == "f64" ? DType::F64 : DType::F32);  // bf16 values: rounded floats
      EXPECT_GE(countAccess(l, OperandKind::Access::InPlace, false), 1);
      EXPECT_EQ(countAccess(l, OperandKind::Access::Splat, false), 1);
      EXPECT_EQ(countAccess(l, OperandKind::Access::Broadcast, false), 1);
      EXPECT_EQ(countAccess(l, OperandKind::Access::InPlace, true), 1);
      EXPECT_EQ(countAccess(l, OperandKind::Access::Broadcast, true), 1);
      if (c.compares()) {
        EXPECT_NE(std::find(l.outputs.begin(), l.outputs.end(), DType::Bool), l.outputs.end()) << "no bool output";
      }
      // bf16 values (a bf16 chain's, an f32 chain's cast to bf16) are
      // rounded where the one-op kernel stores them.
      const std::string src = fusedKernelSource(n, l);
      const bool rounds = std::string(t) == "bf16" || (c.op == "cast" && std::string(t) == "f32");
      EXPECT_EQ(src.find("= kiln_bf16_round(") != std::string::npos, rounds) << src;
      expectCompiles(n, l, label);
      ++nodes;
    }
  }
  EXPECT_EQ(nodes, 3 * static_cast<int>(opCases().size()));
  // Every compilation was real: nothing came from a cache.
  const auto after = nvrtcCounters();
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_EQ(after.compiles - before.compiles, static_cast<uint64_t>(2 * nodes));
}

TEST(FusedNvrtc, SixtyFourBitIndexFormsCompile) {
  TempCacheDir cache;
  Graph g = fused(chainGraph({"gelu", "", "tanh"}, "f32", {4, 6}), "fused_elementwise");
  ASSERT_EQ(g.numNodes(), 1u);
  FusedLayout l = analyzeFused(*g.nodes().front());
  l.wide_index = true;
  const std::string src = fusedKernelSource(*g.nodes().front(), l);
  EXPECT_NE(src.find("typedef unsigned long long I;"), std::string::npos);
  expectCompiles(*g.nodes().front(), l, "gelu, 64-bit indices");
  // A node too large for 32-bit indices picks the 64-bit form by itself.
  Graph big = fused(chainGraph({"relu", "", ""}, "f32", {65536, 32769}), "fused_elementwise");
  ASSERT_EQ(big.numNodes(), 1u);
  EXPECT_TRUE(analyzeFused(*big.nodes().front()).wide_index);
}

struct ReductionCase {
  Shape shape;
  std::string dims;
  bool keepdim;
  Shape reduced;
  const char* what;
};

const std::vector<ReductionCase>& reductionCases() {
  static const std::vector<ReductionCase> cases = {
      {{37, 300}, "[1]", false, {37}, "innermost dim (row)"},
      {{300, 37}, "[0]", false, {37}, "outer dim (column, split in 3)"},
      {{30, 41}, "[]", false, {}, "all dims"},
      {{3, 5, 70}, "[0, 2]", false, {5}, "trailing and outer dims (row, several runs)"},
      {{4, 5, 6, 7}, "[0, 2]", true, {1, 5, 1, 7}, "outer runs (column, several runs)"},
      {{4, 70001}, "[1]", false, {4}, "long rows (row, split)"},
      {{20000, 64}, "[0]", false, {64}, "long columns (column, split)"},
      {{70001}, "[0]", false, {}, "one long row (split)"},
      {{37, 8}, "[-1]", false, {37}, "short rows"},
      {{0, 5}, "[0]", false, {5}, "empty: zeros, NaN means"},
  };
  return cases;
}

TEST(FusedNvrtc, ReductionsCompileSumAndMeanOverInnerOuterAndAllDims) {
  TempCacheDir cache;
  for (const ReductionCase& c : reductionCases())
    for (const char* t : {"f32", "f64"})
      for (const char* op : {"sum", "mean"}) {
        const std::string label = std::string(op) + " " + t + dims(c.shape) + " dims=" + c.dims + " (" + c.what + ")";
        SCOPED_TRACE(label);
        Graph g = fused(reductionGraph(t, c.shape, op, c.dims, c.keepdim, c.reduced), "fused_reduction");
        ASSERT_EQ(g.numNodes(), 1u);
        const Node& n = *g.nodes().front();
        const FusedLayout l = analyzeFused(n);
        EXPECT_TRUE(l.reduction);
        EXPECT_EQ(l.mean, std::string(op) == "mean");
        ASSERT_EQ(l.outputs.size(), 3u);
        EXPECT_EQ(l.outputs[2], DType::Bool);
        EXPECT_EQ(countAccess(l, OperandKind::Access::Broadcast, false), c.shape.size() > 1 ? 1 : 0);
        EXPECT_EQ(countAccess(l, OperandKind::Access::InPlace, true), 1);
        const std::string what = c.what;
        const bool row = what.find("(row") != std::string::npos, column = what.find("(column") != std::string::npos;
        if (row || column) {
          EXPECT_EQ(l.plan.row, row);
        }
        EXPECT_EQ(l.plan.multi, what.find("several runs") != std::string::npos);
        EXPECT_EQ(l.plan.splits > 1, what.find("split") != std::string::npos);
        // Partials in the workspace exactly when the plan splits.
        EXPECT_EQ(fusedWorkspaceBytes(l),
                  l.plan.splits > 1 ? static_cast<size_t>(l.plan.outputs * l.plan.splits) * (t[1] == '3' ? 4 : 8) : 0);
        EXPECT_EQ(l.plan.outputs == 1, what == "all dims" || what == "one long row (split)");
        // The f64 sum and mean of the common modes also in the 64-bit index form.
        expectCompiles(n, l, label);
        if (std::string(t) == "f64" && c.dims != "[-1]" && c.shape[0] != 0) {
          FusedLayout wide = l;
          wide.wide_index = true;
          expectCompiles(n, wide, label + ", 64-bit indices");
        }
      }
}

TEST(FusedNvrtc, ParamsWordsFollowTheLayout) {
  Graph g = fused(reductionGraph("f32", {4, 70001}, "sum", "[1]", false, {4}), "fused_reduction");
  ASSERT_EQ(g.numNodes(), 1u);
  const FusedLayout l = analyzeFused(*g.nodes().front());
  std::vector<int> in(l.operands.size()), out(l.outputs.size());
  std::vector<const void*> ins;
  std::vector<void*> outs;
  for (int& v : in) ins.push_back(&v);
  for (int& v : out) outs.push_back(&v);
  int partial = 0;
  const std::vector<uint64_t> w = packFusedParams(l, ins, outs, &partial);
  ASSERT_GT(w.size(), ins.size() + outs.size() + 1);
  for (size_t k = 0; k < ins.size(); ++k) EXPECT_EQ(w[k], reinterpret_cast<uintptr_t>(ins[k]));
  for (size_t k = 0; k < outs.size(); ++k) EXPECT_EQ(w[ins.size() + k], reinterpret_cast<uintptr_t>(outs[k]));
  EXPECT_EQ(w[ins.size() + outs.size()], static_cast<uint64_t>(4 * 70001));
  EXPECT_EQ(w.back(), reinterpret_cast<uintptr_t>(&partial));
  // The generated struct asserts the same size (compiled in the tests above).
  EXPECT_NE(fusedKernelSource(*g.nodes().front(), l).find("sizeof(Params) == " + std::to_string(w.size() * 8)),
            std::string::npos);
}

TEST(FusedNvrtc, BodiesOutsideTheCodegenAreRejectedWithTheOp) {
  // floor is not fusible: a hand-written body holding it is refused, by name.
  const std::string text = R"(graph g(%x: f32[4] data) {
  %0 = fused_elementwise(%x) {body="graph fused(%i0: f32[4] data) {\n  %0 = floor(%i0) : f32[4]\n  %1 = neg(%0) : f32[4]\n  return %1 \"o0\"\n}\n"} : f32[4]
  return %0 "out"
})";
  auto g = parseGraph(text, "test");
  ASSERT_TRUE(g) << g.error().message;
  const Node& n = *g->nodes().front();
  try {
    (void)analyzeFused(n);
    ADD_FAILURE() << "analyzeFused accepted a body with floor";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("'floor'"), std::string::npos) << e.what();
  }
  CudaKernelRegistry r;
  registerCudaFusedKernels(r);
  EXPECT_TRUE(r.applicable(n).empty()) << "the nvrtc kernel claims a body it cannot generate";
}

TEST(FusedNvrtc, MalformedSourceFailsWithNvrtcsLog) {
  TempCacheDir cache;
  std::string src = "// a deliberately broken kernel\n";
  for (int k = 2; k <= 20; ++k) src += "// padding line " + std::to_string(k) + "\n";
  src +=
      "extern \"C\" __global__ void broken(float* p) {\n"  // line 21
      "  p[0] = kiln_no_such_function(p[1]);\n"            // line 22
      "}\n";
  const auto before = nvrtcCounters();
  auto img = compileCudaSource(src, 90, "the broken test kernel");
  ASSERT_FALSE(img);
  const std::string& m = img.error().message;
  EXPECT_NE(m.find("the broken test kernel"), std::string::npos) << m;
  EXPECT_NE(m.find("NVRTC"), std::string::npos) << m;
  EXPECT_NE(m.find("sm_90"), std::string::npos) << m;
  EXPECT_NE(m.find("kiln_no_such_function"), std::string::npos) << "NVRTC's log is missing:\n" << m;
  EXPECT_NE(m.find("is undefined"), std::string::npos) << "NVRTC's log is missing:\n" << m;
  EXPECT_NE(m.find("    1| // a deliberately broken kernel"), std::string::npos) << "first lines missing:\n" << m;
  EXPECT_NE(m.find("around line 22:\n"), std::string::npos) << m;
  EXPECT_NE(m.find("   22|   p[0] = kiln_no_such_function(p[1]);"), std::string::npos) << m;
  EXPECT_EQ(nvrtcCounters().failures, before.failures + 1);
  // Nothing cached for it; the whole source kept for a look.
  for (const fs::path& p : cache.files()) EXPECT_EQ(p.extension(), ".cu") << p;
  EXPECT_NE(m.find("whole source: "), std::string::npos) << m;
}

/// A small valid source, unique to the test so no other compile shares its key.
std::string smallSource(const std::string& tag) {
  return "// " + tag +
         "\nextern \"C\" __global__ void k(float* p) { p[threadIdx.x] = __fmul_rn(p[threadIdx.x], 2.0f); }\n";
}

TEST(FusedNvrtc, DiskCacheWritesOneFileAndTheNextCompileReadsIt) {
  TempCacheDir cache;
  const std::string src = smallSource("disk cache " + std::to_string(::getpid()));
  const auto c0 = nvrtcCounters();
  auto first = compileCudaSource(src, 90);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE((*first)->from_disk);
  const auto c1 = nvrtcCounters();
  EXPECT_EQ(c1.compiles, c0.compiles + 1);
  EXPECT_EQ(c1.disk_writes, c0.disk_writes + 1);
  // One file: <dir>/nvrtc/<xxh3-128>.cubin.
  const std::vector<fs::path> files = cache.files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].string(), nvrtcCachePath(src, 90));
  EXPECT_EQ(files[0].extension(), ".cubin");
  EXPECT_EQ(files[0].stem().string().size(), 32u);
  EXPECT_EQ(files[0].stem().string(), nvrtcCacheKey(src, 90));
  // In memory: the same image, no compile.
  auto again = compileCudaSource(src, 90);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(), first->get());
  EXPECT_EQ(nvrtcCounters().memory_hits, c1.memory_hits + 1);
  // A new process (the memory cache forgotten): read from disk, no compile.
  clearNvrtcMemoryCache();
  auto disk = compileCudaSource(src, 90);
  ASSERT_TRUE(disk) << disk.error().message;
  EXPECT_TRUE((*disk)->from_disk);
  EXPECT_EQ((*disk)->image, (*first)->image);
  const auto c2 = nvrtcCounters();
  EXPECT_EQ(c2.compiles, c1.compiles);
  EXPECT_EQ(c2.disk_hits, c1.disk_hits + 1);
  EXPECT_EQ(cache.files().size(), 1u);
  // Another arch is another file.
  ASSERT_TRUE(compileCudaSource(src, 80));
  EXPECT_EQ(cache.files().size(), 2u);
  EXPECT_NE(nvrtcCacheKey(src, 80), nvrtcCacheKey(src, 90));
}

TEST(FusedNvrtc, TruncatedOrCorruptCacheFileIsRebuilt) {
  TempCacheDir cache;
  const std::string src = smallSource("truncated cache " + std::to_string(::getpid()));
  auto first = compileCudaSource(src, 90);
  ASSERT_TRUE(first) << first.error().message;
  const std::string path = nvrtcCachePath(src, 90);
  const auto whole = fs::file_size(path);
  for (const char* damage : {"truncate", "garbage", "flip"}) {
    SCOPED_TRACE(damage);
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    ASSERT_EQ(bytes.size(), whole);
    if (std::string(damage) == "truncate")
      bytes.resize(bytes.size() / 2);
    else if (std::string(damage) == "garbage")
      bytes = "not a cache entry at all";
    else
      bytes[bytes.size() - 10] ^= 0x5a;  // same size, wrong checksum
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    clearNvrtcMemoryCache();
    const auto before = nvrtcCounters();
    auto rebuilt = compileCudaSource(src, 90);
    ASSERT_TRUE(rebuilt) << rebuilt.error().message;
    EXPECT_FALSE((*rebuilt)->from_disk);
    EXPECT_EQ((*rebuilt)->image, (*first)->image);
    const auto after = nvrtcCounters();
    EXPECT_EQ(after.disk_rejected, before.disk_rejected + 1);
    EXPECT_EQ(after.compiles, before.compiles + 1);
    EXPECT_EQ(after.disk_writes, before.disk_writes + 1);
    EXPECT_EQ(fs::file_size(path), whole) << "the entry was not rewritten whole";
    EXPECT_EQ(cache.files().size(), 1u);
  }
}

TEST(FusedNvrtc, OptionsTargetTheArchWithoutFmaContraction) {
  const std::vector<std::string> o = nvrtcOptions(90);
  ASSERT_FALSE(o.empty());
  EXPECT_EQ(o[0], "--gpu-architecture=sm_90");
  for (const char* want : {"-std=c++17", "--fmad=false", "-default-device"})
    EXPECT_NE(std::find(o.begin(), o.end(), want), o.end()) << want;
  const std::vector<int> archs = nvrtcSupportedArchs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
  EXPECT_NE(std::find(archs.begin(), archs.end(), 80), archs.end());
}

// Wiring: the CUDA registry (backend/cuda/cuda_registry.cpp) offers the NVRTC kernels.
TEST(FusedNvrtc, TheCudaRegistryPicksTheNvrtcKernels) {
  Graph ew = fused(chainGraph({"silu", "", ""}, "f32", {4, 6}), "fused_elementwise");
  Graph red = fused(reductionGraph("f32", {4, 6}, "sum", "[1]", false, {4}), "fused_reduction");
  ASSERT_EQ(ew.numNodes(), 1u);
  ASSERT_EQ(red.numNodes(), 1u);
  const CudaKernelDef* k = CudaKernelRegistry::get().select(*ew.nodes().front());
  ASSERT_NE(k, nullptr) << "no CUDA kernel for fused_elementwise: registerCudaFusedKernels is not called";
  EXPECT_EQ(k->name, "nvrtc.fused_elementwise");
  EXPECT_TRUE(k->writes_over_input);
  EXPECT_NE(k->prepare, nullptr);
  k = CudaKernelRegistry::get().select(*red.nodes().front());
  ASSERT_NE(k, nullptr) << "no CUDA kernel for fused_reduction: registerCudaFusedKernels is not called";
  EXPECT_EQ(k->name, "nvrtc.fused_reduction");
  EXPECT_FALSE(k->writes_over_input);
}

// ---- on a GPU: against the CPU's fused kernels ---------------------------------

TEST(FusedNvrtcGpu, EveryFusibleOpMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  for (const OpCase& c : opCases())
    for (const char* t : {"f32", "f64", "bf16"}) {
      SCOPED_TRACE(c.label() + " " + t);
      Graph g = fused(chainGraph(c, t, {37, 65}), "fused_elementwise");
      ASSERT_EQ(g.numNodes(), 1u);
      CheckOptions o;
      // bf16: the same roundings as the CPU's fused kernel, except where a
      // libm result one float ulp apart lands on the other side of a bf16 tie.
      o.tol = std::string(t) == "f64" ? 1e-12 : std::string(t) == "bf16" ? 1e-2 : (c.libm() ? 1e-5 : 1e-6);
      expectMatchesCpu(printGraph(g), o);
    }
}

TEST(FusedNvrtcGpu, BroadcastRunsOverLargerShapesMatchTheCpu) {
  KILN_REQUIRE_GPU();
  // Many blocks of the grid-stride loop; a [C, 1, 1]-style run in the middle.
  const char* text =
      R"(graph g(%x: f32[64,48,7,9] data, %bias: f32[9] data, %mask: bool[7,9] data, %s: f32[48,1,1] data) {
  %z = full() {dtype=f32, shape=[], value=0.0} : f32[]
  %0 = add(%x, %bias) : f32[64,48,7,9]
  %1 = mul(%0, %s) : f32[64,48,7,9]
  %2 = where(%mask, %1, %z) : f32[64,48,7,9]
  %3 = gelu(%2) {approximate="none"} : f32[64,48,7,9]
  return %3 "out"
})";
  Graph g = fused(text, "fused_elementwise");
  ASSERT_EQ(g.numNodes(), 1u);
  expectMatchesCpu(printGraph(g), {.tol = 1e-5});
}

TEST(FusedNvrtcGpu, ReductionsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  for (const ReductionCase& c : reductionCases())
    for (const char* t : {"f32", "f64"})
      for (const char* op : {"sum", "mean"}) {
        SCOPED_TRACE(std::string(op) + " " + t + dims(c.shape) + " dims=" + c.dims + " (" + c.what + ")");
        Graph g = fused(reductionGraph(t, c.shape, op, c.dims, c.keepdim, c.reduced), "fused_reduction");
        ASSERT_EQ(g.numNodes(), 1u);
        // f32 sums accumulate in fp32 (the CPU in double): rounding, not more.
        CheckOptions o;
        o.tol = std::string(t) == "f64" ? 1e-12 : 1e-5;
        expectMatchesCpu(printGraph(g), o);
      }
}

TEST(FusedNvrtcGpu, PreparedKernelsComeFromTheDiskCacheInANewProcess) {
  KILN_REQUIRE_GPU();
  TempCacheDir cache;
  Graph g = fused(chainGraph({"hardswish", "", ""}, "f32", {37, 65}), "fused_elementwise");
  ASSERT_EQ(g.numNodes(), 1u);
  const Node& n = *g.nodes().front();
  const std::string src = fusedKernelSource(n, analyzeFused(n));
  const int arch = currentDeviceArch();
  auto first = compileCudaSource(src, arch, "test");
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE((*first)->from_disk);
  EXPECT_EQ(cache.files().size(), 1u);
  clearNvrtcMemoryCache();
  auto second = compileCudaSource(src, arch, "test");
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_TRUE((*second)->from_disk);
  auto loaded = loadCudaSource(src, {"kiln_fused_elementwise"}, "test");
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ((*loaded)->kernels.size(), 1u);
  expectMatchesCpu(printGraph(g), {.tol = 1e-6});
}

}  // namespace
}  // namespace kiln::cuda::test
