// The TorchScript graph walk: environments per call, calls inlined as they
// are met, control flow resolved at import time, constants and attributes
// converted to SVs, and every other node handed to static evaluation or to
// the aten rule table. Errors get the node's op, source line and scope.
#include "core/import/torchscript/ts_walker.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace kiln::ts {

namespace {

constexpr int kMaxCallDepth = 200;
constexpr int64_t kMaxUnroll = 100000;

bool isInplace(const std::string& kind) {
  auto p = kind.find("::");
  std::string base = p == std::string::npos ? kind : kind.substr(p + 2);
  return base.size() > 1 && base.back() == '_' && base.rfind("__", 0) != 0;
}

bool isDataDependent(const std::string& kind) {
  static const char* kinds[] = {"aten::Int",    "aten::Float",          "aten::Bool",
                                "aten::item",   "aten::ScalarImplicit", "aten::is_nonzero",
                                "aten::tolist", "aten::nonzero",        "aten::masked_select",
                                "aten::unique", "aten::_unique2",       "aten::nonzero_numpy"};
  for (const char* k : kinds)
    if (kind == k) return true;
  return false;
}

/// Short hint for an unsupported op: supported aten ops with a similar name.
std::string similarOps(const std::string& kind) {
  auto p = kind.find("::");
  std::string base = p == std::string::npos ? kind : kind.substr(p + 2);
  while (!base.empty() && (base.back() == '_' || std::isdigit(static_cast<unsigned char>(base.back()))))
    base.pop_back();
  std::string prefix = base.substr(0, std::min<size_t>(3, base.size()));
  std::vector<std::string> names = atenRuleNames(), similar;
  for (const std::string& n : names)
    if (!prefix.empty() && n.compare(6, prefix.size(), prefix) == 0 && similar.size() < 5) similar.push_back(n);
  std::string hint;
  for (const std::string& s : similar) hint += (hint.empty() ? "" : ", ") + s;
  std::string total = std::to_string(names.size()) + " aten ops (core/import/torchscript/aten_lowering_*.cpp)";
  if (hint.empty()) return total + "; `kiln ops` lists the Kiln ops";
  return hint + " among " + total + "; `kiln ops` lists the Kiln ops";
}

/// Scalars keep the Python type the node declares (aten::pow.int gives a float, ...).
SV coerce(const SV& v, const c10::TypePtr& type) {
  if (!v.isNumber()) return v;
  switch (type->kind()) {
    case c10::TypeKind::IntType:
      return SV::integer(static_cast<int64_t>(v.number()));
    case c10::TypeKind::FloatType:
      return SV::real(v.number());
    case c10::TypeKind::BoolType:
      return SV::boolean(v.number() != 0);
    default:
      return v;
  }
}

}  // namespace

std::string firstLine(const std::string& message) {
  size_t start = 0;
  while (start < message.size()) {
    size_t end = message.find('\n', start);
    std::string line = message.substr(start, end == std::string::npos ? std::string::npos : end - start);
    size_t b = line.find_first_not_of(" \t\r");
    if (b != std::string::npos) {
      line = line.substr(b);
      while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
      return line;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "unknown error";
}

std::string sourceLocation(const torch::jit::Node* n) {
  torch::jit::SourceRange r = n->sourceRange();
  if (auto generated = r.findSourceRangeThatGenerated()) r = *generated;
  auto flc = r.file_line_col();
  if (!flc) return {};
  std::string file = std::get<0>(*flc);
  if (file.empty()) return {};
  for (const char* marker : {"site-packages/", "dist-packages/"}) {
    auto p = file.rfind(marker);
    if (p != std::string::npos) file = file.substr(p + std::strlen(marker));
  }
  return file + ":" + std::to_string(std::get<1>(*flc));
}

Tensor kilnTensor(const at::Tensor& src) {
  at::Tensor t = src.detach().to(at::kCPU).contiguous();
  auto dt = dtypeFromScalarType(static_cast<int64_t>(t.scalar_type()));
  if (!dt) fail(std::string("tensors of dtype ") + c10::toString(t.scalar_type()) + " are not supported by Kiln");
  TensorType type{*dt, Shape(t.sizes().begin(), t.sizes().end())};
  // Share the storage libtorch just read from the archive (GPT-2-small: 500 MB
  // not copied, not page-faulted twice) when the tensor is all of it, aligned:
  // a training session may update such a buffer in place once it alone holds
  // it, which must not show through another tensor's view of the storage.
  // Views (storage offsets, partial storages) are copied.
  if (type.bytes() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 64 == 0 && t.storage_offset() == 0 &&
      t.storage().nbytes() == type.bytes()) {
    auto keep = std::make_shared<at::Tensor>(t);
    return Tensor::adopt(std::move(type),
                         std::shared_ptr<unsigned char[]>(keep, static_cast<unsigned char*>(keep->data_ptr())));
  }
  Tensor out = Tensor::empty(type);
  if (out.bytes()) std::memcpy(out.raw(), t.data_ptr(), out.bytes());
  return out;
}

Tensor Walker::constantTensor(const at::Tensor& t) {
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(t.data_ptr())) + "/" +
                    shapeStr(Shape(t.sizes().begin(), t.sizes().end())) +
                    shapeStr(Shape(t.strides().begin(), t.strides().end())) + "/" +
                    std::to_string(static_cast<int>(t.scalar_type()));
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  Tensor k = kilnTensor(t);
  constants_[key] = k;
  return k;
}

SV Walker::object(const torch::jit::Object& obj, const std::string& path) {
  auto it = object_by_path_.find(path);
  if (it != object_by_path_.end()) return SV::object(it->second, path);
  auto handle = static_cast<int64_t>(objects_.size());
  objects_.push_back(obj);
  object_by_path_[path] = handle;
  return SV::object(handle, path);
}

SV Walker::fromIValue(const c10::IValue& v, const std::string& path) {
  if (v.isNone()) return SV::none();
  if (v.isBool()) return SV::boolean(v.toBool());
  if (v.isInt()) return SV::integer(v.toInt());
  if (v.isDouble()) return SV::real(v.toDouble());
  if (v.isString()) return SV::str(v.toStringRef());
  if (v.isDevice()) return SV::device(v.toDevice().str());
  if (v.isTensor()) return SV::constTensor(constantTensor(v.toTensor()));
  if (v.isList()) {
    std::vector<SV> items;
    for (const c10::IValue& e : v.toListRef()) items.push_back(fromIValue(e));
    return SV::list(std::move(items));
  }
  if (v.isTuple()) {
    std::vector<SV> items;
    for (const c10::IValue& e : v.toTuple()->elements()) items.push_back(fromIValue(e));
    return SV::tuple(std::move(items));
  }
  if (v.isObject()) return object(torch::jit::Object(v.toObject()), path);
  fail(std::string("values of kind ") + v.tagKind() + " are not supported");
}

// ---- Walking -----------------------------------------------------------------------

std::vector<SV> Walker::callMethod(const SV& self, const std::string& method, std::vector<SV> args) {
  if (self.kind != SV::Kind::Object) fail("method call on " + self.describe());
  torch::jit::Object& obj = objects_.at(static_cast<size_t>(self.i));
  auto m = obj.find_method(method);
  if (!m) fail("module " + (self.s.empty() ? std::string("<root>") : self.s) + " has no method " + method);
  torch::jit::Function& fn = m->function();
  const auto& params = fn.getSchema().arguments();
  args.insert(args.begin(), self);
  for (size_t k = args.size(); k < params.size(); ++k) {
    if (!params[k].default_value()) fail(method + "() needs argument '" + params[k].name() + "'");
    args.push_back(fromIValue(*params[k].default_value()));
  }
  return walkGraph(*torch::jit::toGraphFunction(fn).graph(), std::move(args), self.s);
}

std::vector<SV> Walker::walkGraph(torch::jit::Graph& g, std::vector<SV> inputs, const std::string& scope) {
  if (depth_ >= kMaxCallDepth) fail("calls nested more than " + std::to_string(kMaxCallDepth) + " deep");
  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& x) : d(x) { ++d; }
    ~DepthGuard() { --d; }
  } guard(depth_);
  if (inputs.size() != g.inputs().size())
    fail("a graph with " + std::to_string(g.inputs().size()) + " inputs called with " + std::to_string(inputs.size()) +
         " arguments");
  Frame f;
  f.scope = scope;
  for (size_t k = 0; k < inputs.size(); ++k) f.env[g.inputs()[k]] = std::move(inputs[k]);
  walkBlock(g.block(), f);
  std::vector<SV> outs;
  for (const torch::jit::Value* o : g.outputs()) outs.push_back(lookup(o, f));
  return outs;
}

void Walker::walkBlock(torch::jit::Block* b, Frame& f) {
  for (torch::jit::Node* n : b->nodes()) {
    if (keep_going && ++visited_ % kNodesBetweenCancelChecks == 0 && !keep_going()) throw ImportCancelled{};
    visit(n, f);
  }
}

const SV& Walker::lookup(const torch::jit::Value* v, Frame& f) {
  auto it = f.env.find(v);
  if (it == f.env.end()) fail("value %" + v->debugName() + " is used before it is defined");
  return it->second;
}

void Walker::bind(torch::jit::Node* n, Frame& f, std::vector<SV> outs) {
  if (outs.size() != n->outputs().size())
    fail("produced " + std::to_string(outs.size()) + " values for " + std::to_string(n->outputs().size()) + " outputs");
  for (size_t k = 0; k < outs.size(); ++k) f.env[n->output(k)] = coerce(outs[k], n->output(k)->type());
}

std::string Walker::scopeOf(torch::jit::Node* n, const Frame& f) const {
  // Traced graphs that were not saved carry the module path as a scope.
  if (n->scope() && !n->scope()->isBlank()) {
    std::string names = n->scope()->namesFromRoot();
    std::string last = names.substr(names.rfind('/') == std::string::npos ? 0 : names.rfind('/') + 1);
    if (last.rfind("__module.", 0) == 0) return last.substr(9);
  }
  std::string scope = f.scope;
  // Nodes inlined before the archive was saved carry a callstack of module instances.
  for (auto cs = n->callstack(); cs; cs = (*cs)->callee()) {
    auto info = (*cs)->module_instance();
    if (!info) continue;
    std::string name = info->instance_name();
    if (name.empty() || name == "SELF" || name == "INSTANCE_NAME_UNKNOWN") continue;
    scope += (scope.empty() ? "" : ".") + name;
  }
  return scope;
}

std::string Walker::where(torch::jit::Node* n, const Frame& f) const {
  std::string w = n->kind().toQualString();
  std::string loc = sourceLocation(n), scope = scopeOf(n, f);
  if (!loc.empty()) w += " at " + loc;
  if (!scope.empty()) w += " (scope " + scope + ")";
  return w;
}

void Walker::unsupported(torch::jit::Node* n, const Frame& f, const std::string& kind) {
  if (isDataDependent(kind))
    throw NodeError(where(n, f) +
                    ": data-dependent: it turns a tensor computed at run time into a Python value "
                    "or a data-dependent shape; Kiln needs shapes and control flow known at import time");
  if (kind == "prim::PythonOp")
    throw NodeError(where(n, f) +
                    ": a Python function TorchScript cannot see into (prim::PythonOp); "
                    "Kiln supports only aten ops");
  std::string w = where(n, f);
  throw NodeError("unsupported op " + w + "; Kiln supports: " + similarOps(kind));
}

void Walker::skip(torch::jit::Node* n, Frame& f, const std::string& message) {
  // The message starts with where(n, f) (lowering errors: "WHERE: why";
  // no lowering: "unsupported op WHERE; Kiln supports: ..."): keep the why.
  const std::string w = where(n, f);
  std::string reason = message;
  if (reason.rfind(w + ": ", 0) == 0)
    reason = reason.substr(w.size() + 2);
  else if (reason.rfind("unsupported op " + w, 0) == 0)
    reason = "no lowering" + reason.substr(15 + w.size());
  unsupported_->push_back({n->kind().toQualString(), reason, sourceLocation(n), scopeOf(n, f)});
  for (const torch::jit::Value* o : n->outputs()) f.env[o] = SV::unsupported();
}

bool Walker::skipDependent(torch::jit::Node* n, Frame& f, const std::vector<SV>& args) {
  if (!unsupported_) return false;
  for (const SV& a : args)
    if (a.dependsOnUnsupported()) {
      for (const torch::jit::Value* o : n->outputs()) f.env[o] = SV::unsupported();
      return true;
    }
  return false;
}

void Walker::visit(torch::jit::Node* n, Frame& f) {
  namespace prim = torch::jit::prim;
  const torch::jit::Symbol kind = n->kind();
  try {
    if (kind == prim::Constant) {
      f.env[n->output()] = constantOf(n);
      return;
    }
    if (kind == prim::GetAttr) return visitGetAttr(n, f);
    if (kind == prim::SetAttr) return visitSetAttr(n, f);
    std::vector<SV> args;
    for (const torch::jit::Value* in : n->inputs()) args.push_back(lookup(in, f));
    // A call still walks its body (what does not depend on an unknown
    // argument is checked); anything else with an unknown input is unknown.
    if (kind == prim::CallMethod || kind == prim::CallFunction) return visitCall(n, f, std::move(args));
    if (skipDependent(n, f, args)) return;
    if (kind == prim::If) return visitIf(n, f);
    if (kind == prim::Loop) return visitLoop(n, f);
    if (kind == prim::RaiseException) {
      std::string msg = !args.empty() && args[0].kind == SV::Kind::Str ? args[0].s : "an exception";
      fail("the model raises an exception on this path: " + firstLine(msg));
    }
    if (kind == prim::requires_grad) {
      const SV& t = args.at(0);
      bool r = t.kind == SV::Kind::Tensor && cx_.requiresGrad(cx_.read(t));
      return bind(n, f, {SV::boolean(r)});
    }
    visitGeneric(n, f, std::move(args));
  } catch (const NodeError& e) {
    // kiln check records a node's own failure; one raised inside a block
    // or a called method was recorded where it happened (and is rethrown
    // only when not collecting).
    if (!unsupported_ || kind == prim::If || kind == prim::Loop || kind == prim::CallMethod ||
        kind == prim::CallFunction)
      throw;
    skip(n, f, e.what());
  } catch (const KilnException& e) {
    if (unsupported_) return skip(n, f, where(n, f) + ": " + e.what());
    throw NodeError(where(n, f) + ": " + e.what());
  } catch (const c10::Error& e) {
    if (unsupported_) return skip(n, f, where(n, f) + ": " + firstLine(e.what_without_backtrace()));
    throw NodeError(where(n, f) + ": " + firstLine(e.what_without_backtrace()));
  }
}

void Walker::visitGeneric(torch::jit::Node* n, Frame& f, std::vector<SV> args) {
  const std::string kind = n->kind().toQualString();
  cx_.scope = scopeOf(n, f);
  cx_.provenance = sourceLocation(n);
  if (auto r = evalStatic(kind, args, n->outputs().size())) return bind(n, f, std::move(*r));
  const AtenRule* rule = findAtenRule(kind);
  bool inplace = isInplace(kind);
  if (!rule && inplace) rule = findAtenRule(kind.substr(0, kind.size() - 1));
  if (!rule) unsupported(n, f, kind);
  Args a(cx_, args, rule->kiln);
  std::vector<SV> outs = rule->fn(cx_, a);
  if (inplace && args.at(0).kind == SV::Kind::Tensor) {
    // x.op_(...) computes op(x, ...) and stores it in x: every alias of x sees it.
    cx_.write(args[0], cx_.read(outs.at(0)));
    outs = {args[0]};
  } else if (inplace) {
    // In place on a constant (torch.tensor(...).add_(1)): the value itself becomes the result.
    SV result = cx_.fresh(cx_.read(outs.at(0)));
    f.env[n->input(0)] = result;
    outs = {result};
  }
  bind(n, f, std::move(outs));
}

void Walker::visitIf(torch::jit::Node* n, Frame& f) {
  const SV& c = lookup(n->input(0), f);
  if (!c.isNumber() && !c.isScalarConst())
    fail("data-dependent control flow: the condition is " + c.describe() +
         ", computed at run time; Kiln needs control flow known at import time");
  torch::jit::Block* b = n->blocks()[c.number() != 0 ? 0 : 1];
  walkBlock(b, f);
  std::vector<SV> outs;
  for (const torch::jit::Value* o : b->outputs()) outs.push_back(lookup(o, f));
  bind(n, f, std::move(outs));
}

void Walker::visitLoop(torch::jit::Node* n, Frame& f) {
  auto known = [&](const SV& v, const char* what) {
    if (!v.isNumber() && !v.isScalarConst())
      fail(std::string("data-dependent control flow: the loop ") + what + " is " + v.describe() +
           ", computed at run time; Kiln needs loops with a trip count known at import time");
    return v.number();
  };
  auto trips = static_cast<int64_t>(std::min(known(lookup(n->input(0), f), "trip count"), 9.2e18));
  bool cond = known(lookup(n->input(1), f), "condition") != 0;
  std::vector<SV> state;
  for (size_t k = 2; k < n->inputs().size(); ++k) state.push_back(lookup(n->input(k), f));
  torch::jit::Block* body = n->blocks()[0];
  for (int64_t i = 0; i < trips && cond; ++i) {
    if (i >= kMaxUnroll) fail("the loop runs more than " + std::to_string(kMaxUnroll) + " iterations");
    f.env[body->inputs()[0]] = SV::integer(i);
    for (size_t k = 0; k < state.size(); ++k) f.env[body->inputs()[k + 1]] = state[k];
    walkBlock(body, f);
    cond = known(lookup(body->outputs()[0], f), "condition") != 0;
    for (size_t k = 0; k < state.size(); ++k) state[k] = lookup(body->outputs()[k + 1], f);
  }
  bind(n, f, std::move(state));
}

void Walker::visitGetAttr(torch::jit::Node* n, Frame& f) {
  const SV& obj = lookup(n->input(0), f);
  if (obj.kind != SV::Kind::Object) fail("attribute of " + obj.describe());
  const std::string name = n->s(torch::jit::attr::name);
  const std::string path = obj.s.empty() ? name : obj.s + "." + name;
  auto over = attr_overrides_.find(path);
  if (over != attr_overrides_.end()) {
    f.env[n->output()] = over->second;
    return;
  }
  c10::IValue v = objects_.at(static_cast<size_t>(obj.i)).attr(name);
  if (v.isTensor())
    f.env[n->output()] = resolve_(path, v.toTensor());
  else
    f.env[n->output()] = fromIValue(v, path);
}

void Walker::visitSetAttr(torch::jit::Node* n, Frame& f) {
  const SV& obj = lookup(n->input(0), f);
  if (obj.kind != SV::Kind::Object) fail("attribute of " + obj.describe());
  const SV& value = lookup(n->input(1), f);
  const std::string name = n->s(torch::jit::attr::name);
  const std::string path = obj.s.empty() ? name : obj.s + "." + name;
  c10::IValue cur = objects_.at(static_cast<size_t>(obj.i)).attr(name);
  if (cur.isTensor() && value.isTensorLike()) {
    // Assigning a buffer (self.running_mean = ...) updates it like an in-place write.
    cx_.scope = scopeOf(n, f);
    cx_.provenance = sourceLocation(n);
    cx_.write(resolve_(path, cur.toTensor()), cx_.read(value));
    return;
  }
  attr_overrides_[path] = value;
}

void Walker::visitCall(torch::jit::Node* n, Frame& f, std::vector<SV> args) {
  if (n->kind() == torch::jit::prim::CallMethod) {
    SV self = args.at(0);
    args.erase(args.begin());
    return bind(n, f, callMethod(self, n->s(torch::jit::attr::name), std::move(args)));
  }
  const SV& fn = args.at(0);
  if (fn.kind != SV::Kind::Function) fail("call of " + fn.describe());
  torch::jit::Function* callee = functions_.at(static_cast<size_t>(fn.i));
  std::vector<SV> rest(args.begin() + 1, args.end());
  bind(n, f, walkGraph(*torch::jit::toGraphFunction(*callee).graph(), std::move(rest), f.scope));
}

SV Walker::constantOf(torch::jit::Node* n) {
  const torch::jit::Value* out = n->output();
  if (out->type()->kind() == c10::TypeKind::FunctionType) {
    torch::jit::Function* fn = out->type()->expect<c10::FunctionType>()->function();
    functions_.push_back(fn);
    return SV::function(static_cast<int64_t>(functions_.size() - 1), fn->name());
  }
  auto iv = torch::jit::toIValue(out);
  if (!iv) fail("a constant of type " + out->type()->str() + " is not supported");
  SV v = fromIValue(*iv);
  // A 0-d tensor constant is a Python number the tracer captured (x * 1.5): the
  // interpreter promotes it like a scalar (i64 * 1.5 gives f32, not f64), so do we.
  // torch.tensor(1.5) traces as such a constant followed by aten::to, which unwraps it.
  if (v.kind == SV::Kind::Const && v.constant.rank() == 0) v.wrapped = true;
  return v;
}

}  // namespace kiln::ts
