// The Python module's native part, `kiln._kiln` (pybind11): a compiled
// training step driven from Python. The options are the option table's
// (driver/option_table.h), by name; the model is compiled by the same
// driver::compileStep as `kiln compile`; tensors cross as NumPy arrays
// without copies where they are contiguous and aligned (a batch's arrays are
// adopted by Kiln's tensors, which keep them alive; the state dict's arrays
// view Kiln's buffers). python/kiln/__init__.py is the API users call.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>

#include "core/file_io.h"
#include "driver/compile.h"
#include "driver/export_graph.h"
#include "driver/option_table.h"
#include "driver/report.h"
#include "driver/report_json.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

/// Kiln's one-line errors, raised as kiln.KilnError (a RuntimeError).
struct KilnError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T orRaise(Result<T> r) {
  if (!r) throw KilnError(r.error().message);
  return std::move(*r);
}
void orRaise(const Status& s) {
  if (!s) throw KilnError(s.error().message);
}

/// The NumPy dtype of a Kiln dtype and back (bf16 and f16 have none here).
DType dtypeOf(const py::array& a, const std::string& what) {
  const py::dtype d = a.dtype();
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'f' && size == 4) return DType::F32;
  if (kind == 'f' && size == 8) return DType::F64;
  if (kind == 'f' && size == 2) return DType::F16;
  if (kind == 'i' && size == 8) return DType::I64;
  if (kind == 'i' && size == 4) return DType::I32;
  if (kind == 'i' && size == 2) return DType::I16;
  if (kind == 'i' && size == 1) return DType::I8;
  if (kind == 'u' && size == 1) return DType::U8;
  if (kind == 'b') return DType::Bool;
  throw KilnError(what + ": arrays of dtype " + py::repr(d).cast<std::string>() + " are not supported");
}

py::dtype numpyDtype(DType t) {
  switch (t) {
    case DType::F32: return py::dtype::of<float>();
    case DType::F64: return py::dtype::of<double>();
    case DType::F16: return py::dtype("float16");
    case DType::I64: return py::dtype::of<int64_t>();
    case DType::I32: return py::dtype::of<int32_t>();
    case DType::I16: return py::dtype::of<int16_t>();
    case DType::I8: return py::dtype::of<int8_t>();
    case DType::U8: return py::dtype::of<uint8_t>();
    case DType::Bool: return py::dtype::of<bool>();
    case DType::BF16: break;
  }
  throw KilnError("bf16 tensors have no NumPy dtype");
}

/// A batch tensor from an array: adopted without a copy when it is
/// C-contiguous and 64-byte aligned (as Kiln's buffers are; PyTorch's CPU
/// allocator aligns so), else copied.
Tensor tensorFrom(const py::array& a, const std::string& what) {
  TensorType type{dtypeOf(a, what), Shape(a.shape(), a.shape() + a.ndim())};
  const bool contiguous = (a.flags() & py::array::c_style) != 0;
  const auto address = reinterpret_cast<uintptr_t>(a.data());
  if (contiguous && address % 64 == 0 && type.bytes() > 0) {
    // The array stays alive while any Kiln tensor shares the buffer; it is
    // released under the GIL, whichever thread drops the last reference.
    auto* owner = new py::object(a);
    std::shared_ptr<unsigned char[]> buf(static_cast<unsigned char*>(const_cast<void*>(a.data())),
                                         [owner](unsigned char*) {
                                           py::gil_scoped_acquire gil;
                                           delete owner;
                                         });
    return Tensor::adopt(type, std::move(buf));
  }
  Tensor t(type);
  const py::array c = py::array::ensure(a, py::array::c_style);
  if (type.bytes()) std::memcpy(t.data<unsigned char>(), c.data(), type.bytes());
  return t;
}

/// An array that views `t`'s buffer (it keeps the buffer alive); bf16 as a
/// float32 copy.
py::array arrayOf(const Tensor& t) {
  Tensor view = t;
  if (t.dtype() == DType::BF16) {
    view = Tensor(DType::F32, t.shape());
    for (int64_t k = 0; k < t.numel(); ++k) view.set(k, t.at(k));
  }
  auto* keep = new Tensor(view);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  const py::dtype d = numpyDtype(view.dtype());
  std::vector<py::ssize_t> shape(view.shape().begin(), view.shape().end());
  return py::array(d, shape, {}, keep->data<unsigned char>(), owner);
}

/// The keyword options kiln.compile takes: kiln train's, by the option
/// table's names, but the model (its first argument).
const std::set<std::string>& optionNames() {
  static const std::set<std::string> names = [] {
    std::set<std::string> out;
    for (const driver::OptionSpec& spec : driver::optionTable())
      if ((spec.commands & driver::kTrain) && spec.jsonName() != "model") out.insert(spec.jsonName());
    return out;
  }();
  return names;
}

/// The options of a Python call; an unknown name or a value of the wrong
/// type is an error naming it.
driver::CompileOptions optionsFrom(const py::dict& kwargs) {
  nlohmann::json j = nlohmann::json::object();
  const py::object dumps = py::module_::import("json").attr("dumps");
  for (const auto& [key, value] : kwargs) {
    const std::string name = py::str(key);
    if (!optionNames().count(name))
      throw KilnError("unknown option '" + name + "' (kiln options lists them, by name without the dashes)");
    py::object v = py::reinterpret_borrow<py::object>(value);
    if (py::isinstance<py::tuple>(v)) v = py::list(v);
    j[name] = nlohmann::json::parse(py::str(dumps(v)).cast<std::string>());
  }
  driver::CompileOptions o;
  orRaise(driver::optionsFromJson(j, o));
  return o;
}

class Step {
 public:
  Step(const std::string& path, const std::vector<std::string>& input_shapes, const py::dict& kwargs) {
    const auto t0 = std::chrono::steady_clock::now();
    options_ = optionsFrom(kwargs);
    options_.model.path = path;
    if (options_.model.input_shapes.empty()) options_.model.input_shapes = input_shapes;
    options_.prefetch = 0;  // batches come from Python, not from a reader thread
    {
      py::gil_scoped_release nogil;
      auto bound = driver::compileStep(options_, TrainingGraphKind::Step);
      if (!bound) throw KilnError(bound.error().message);
      bound_ = std::move(*bound);
    }
    compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (const Value* v : bound_.session->batchInputs()) input_names_.push_back(v->name());
  }

  /// One training step on these inputs and target; returns the step's number.
  int64_t run(const std::vector<py::array>& inputs, const py::object& target) {
    TensorMap batch;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string name = "input" + std::to_string(i);
      batch.emplace(name, tensorFrom(inputs[i], name));
    }
    if (!target.is_none()) batch.emplace("target", tensorFrom(target.cast<py::array>(), "target"));
    const std::string where = "the batch of step " + std::to_string(bound_.session->stepsDone() + 1);
    orRaise(bound_.session->checkBatch(batch, where));
    py::gil_scoped_release nogil;
    orRaise(bound_.session->step(batch));
    return bound_.session->stepsDone();
  }

  double readLoss() {
    py::gil_scoped_release nogil;
    return orRaise(bound_.session->readLoss());
  }

  py::dict stateDict() const {
    TensorMap state;
    {
      py::gil_scoped_release nogil;
      state = bound_.session->stateDict();
    }
    py::dict out;
    for (const auto& [name, t] : state) out[py::str(name)] = arrayOf(t);
    return out;
  }

  std::string report() const {
    return driver::toJson(driver::buildReport("compile", options_, bound_, compile_ms_)).dump();
  }

  void exportGraph(const std::string& path, const std::string& format) const {
    orRaise(driver::exportStepGraph(bound_.session->graph(), options_.model, format, path));
  }

  int64_t stepsDone() const { return bound_.session->stepsDone(); }
  double nextLr() const { return bound_.session->nextLr(); }
  std::vector<std::string> inputNames() const { return input_names_; }

 private:
  driver::CompileOptions options_;
  driver::BoundStep bound_;
  double compile_ms_ = 0;
  std::vector<std::string> input_names_;
};

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_kiln, m) {
  using kiln::python::Step;
  m.doc() = "Kiln's native module: a compiled training step (use the kiln package)";
  py::register_exception<kiln::python::KilnError>(m, "KilnError", PyExc_RuntimeError);
  m.attr("__version__") = KILN_VERSION;
  py::class_<Step>(m, "Step")
      .def(py::init<const std::string&, const std::vector<std::string>&, const py::dict&>(), py::arg("path"),
           py::arg("input_shapes"), py::arg("options"))
      .def("run", &Step::run, py::arg("inputs"), py::arg("target"))
      .def("read_loss", &Step::readLoss)
      .def("state_dict", &Step::stateDict)
      .def("report", &Step::report)
      .def("export", &Step::exportGraph, py::arg("path"), py::arg("format"))
      .def_property_readonly("steps_done", &Step::stepsDone)
      .def_property_readonly("next_lr", &Step::nextLr)
      .def_property_readonly("input_names", &Step::inputNames);
  m.def("option_names", [] { return std::vector<std::string>(kiln::python::optionNames().begin(),
                                                                kiln::python::optionNames().end()); });
}
