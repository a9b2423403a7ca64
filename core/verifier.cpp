#include "core/verifier.h"

#include <algorithm>
#include <unordered_set>

#include "core/op_table.h"
#include "core/text_ir.h"

namespace kiln {
namespace {

class Verifier {
 public:
  explicit Verifier(const Graph& g) : g_(g) {}

  Status run() {
    std::unordered_set<std::string> names;
    for (const Value* v : g_.inputs()) {
      if (!names.insert(v->name()).second) problem("graph input '" + v->name() + "' is declared twice");
      if (v->role() == ValueRole::Intermediate) problem("graph input '" + v->name() + "' has no role");
      defined_.insert(v);
    }
    for (const auto& n : g_.nodes()) checkNode(*n);
    for (const GraphOutput& o : g_.outputs())
      if (!defined_.count(o.value)) problem("graph output '" + o.name + "' is not a value of this graph");
    checkUses();
    if (problems_.empty()) return Status::Ok();
    std::string msg = "invalid graph: " + problems_[0];
    for (size_t i = 1; i < problems_.size() && i < 10; ++i) msg += "\n  " + problems_[i];
    if (problems_.size() > 10) msg += "\n  ... and " + std::to_string(problems_.size() - 10) + " more";
    return Error{msg};
  }

 private:
  void problem(std::string p) { problems_.push_back(std::move(p)); }

  void checkNode(const Node& n) {
    const OpDef* def = OpTable::get().find(n.op());
    std::string where = printNode(n);
    if (!def || def != &n.def()) {
      problem(where + ": op is not in the op table");
      return;
    }
    int count = static_cast<int>(n.numInputs());
    if (count < def->min_inputs || (def->max_inputs >= 0 && count > def->max_inputs))
      problem(where + ": wrong number of inputs (" + std::to_string(count) + ")");
    for (size_t i = 0; i < n.numInputs(); ++i)
      if (!defined_.count(n.input(i)))
        problem(where + ": operand " + std::to_string(i) + " is used before it is defined or is not in this graph");
    bool attrs_ok = true;
    for (const auto& [name, value] : n.attrs()) {
      const AttrSpec* spec = def->findAttr(name);
      if (!spec) {
        problem(where + ": unknown attribute '" + name + "' for " + n.op());
        attrs_ok = false;
      } else if (spec->kind != attrKind(value) && !(spec->kind == AttrKind::Float && attrKind(value) == AttrKind::Int)) {
        problem(where + ": attribute '" + name + "' must be a " + std::string(attrKindName(spec->kind)));
        attrs_ok = false;
      }
    }
    for (const AttrSpec& spec : def->attrs)
      if (!spec.default_value && !spec.optional && !n.hasAttr(spec.name)) {
        problem(where + ": missing required attribute '" + spec.name + "'");
        attrs_ok = false;
      }
    if (attrs_ok) {
      try {
        std::vector<TensorType> expect = def->infer(n);
        if (expect.size() != n.numOutputs()) {
          problem(where + ": has " + std::to_string(n.numOutputs()) + " results, the op produces " +
                  std::to_string(expect.size()));
        } else {
          for (size_t i = 0; i < expect.size(); ++i)
            if (expect[i] != n.output(i)->type())
              problem(where + ": result " + std::to_string(i) + " is " + n.output(i)->type().str() +
                      " but shape inference gives " + expect[i].str());
        }
      } catch (const KilnException& e) {
        problem(where + ": " + e.what());
      }
    }
    for (const Value* o : n.outputs()) {
      if (o->producer() != &n) problem(where + ": result does not point back at its node");
      if (!defined_.insert(o).second) problem(where + ": result defined twice");
    }
  }

  void checkUses() {
    for (const auto& n : g_.nodes())
      for (size_t i = 0; i < n->numInputs(); ++i) {
        const auto& uses = n->input(i)->uses();
        bool found = std::any_of(uses.begin(), uses.end(),
                                 [&](const Use& u) { return u.user == n.get() && u.index == i; });
        if (!found) problem(printNode(*n) + ": operand " + std::to_string(i) + " is missing from its use list");
      }
    for (const auto& n : g_.nodes())
      for (const Value* v : n->outputs())
        for (const Use& u : v->uses())
          if (u.index >= u.user->numInputs() || u.user->input(u.index) != v)
            problem(printNode(*n) + ": stale entry in a use list");
  }

  const Graph& g_;
  std::unordered_set<const Value*> defined_;
  std::vector<std::string> problems_;
};

}  // namespace

Status verify(const Graph& g) { return Verifier(g).run(); }

}  // namespace kiln
