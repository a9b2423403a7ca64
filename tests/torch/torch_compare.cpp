#include "tests/torch/torch_compare.h"

#include <cstring>

#include "core/tensor_compare.h"

namespace kiln::testing {

torch::ScalarType toTorchDType(DType t) {
  switch (t) {
    case DType::F32: return torch::kFloat32;
    case DType::F64: return torch::kFloat64;
    case DType::F16: return torch::kFloat16;
    case DType::BF16: return torch::kBFloat16;
    case DType::I64: return torch::kInt64;
    case DType::I32: return torch::kInt32;
    case DType::I16: return torch::kInt16;
    case DType::I8: return torch::kInt8;
    case DType::U8: return torch::kUInt8;
    case DType::Bool: return torch::kBool;
  }
  return torch::kFloat32;
}

DType fromTorchDType(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return DType::F32;
    case torch::kFloat64: return DType::F64;
    case torch::kFloat16: return DType::F16;
    case torch::kBFloat16: return DType::BF16;
    case torch::kInt64: return DType::I64;
    case torch::kInt32: return DType::I32;
    case torch::kInt16: return DType::I16;
    case torch::kInt8: return DType::I8;
    case torch::kUInt8: return DType::U8;
    case torch::kBool: return DType::Bool;
    default: throw std::runtime_error("unsupported torch dtype");
  }
}

torch::Tensor toTorch(const Tensor& t) {
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  torch::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(toTorchDType(t.dtype())));
  if (t.bytes()) std::memcpy(out.data_ptr(), t.raw(), t.bytes());
  return out;
}

Tensor fromTorch(const torch::Tensor& src) {
  torch::Tensor c = src.contiguous();
  Shape shape(c.sizes().begin(), c.sizes().end());
  Tensor t(fromTorchDType(c.scalar_type()), shape);
  if (t.bytes()) std::memcpy(t.raw(), c.data_ptr(), t.bytes());
  return t;
}

std::vector<torch::Tensor> runOp(const std::string& op, const std::vector<torch::Tensor>& inputs,
                                 const AttrMap& attrs, const std::vector<std::string>& dialects) {
  Graph g;
  std::vector<Value*> ins;
  TensorMap bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = fromTorch(inputs[i]);
    std::string name = "input" + std::to_string(i);
    ins.push_back(g.addInput(name, t.type(), ValueRole::Data));
    bound[name] = t;
  }
  Node* n = nullptr;
  try {
    n = g.create(op, ins, attrs);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "building " << op << ": " << e.what();
    return {};
  }
  for (size_t i = 0; i < n->numOutputs(); ++i) g.addOutput(n->output(i), "output" + std::to_string(i));
  CpuExecutorOptions options;
  options.kernels.dialects.dialects = dialects;
  auto ex = CpuExecutor::create(g, options);
  if (!ex.ok()) {
    ADD_FAILURE() << ex.error().message;
    return {};
  }
  auto outs = ex->run(bound);
  if (!outs.ok()) {
    ADD_FAILURE() << op << ": " << outs.error().message;
    return {};
  }
  std::vector<torch::Tensor> result;
  for (const Tensor& t : *outs) result.push_back(toTorch(t));
  return result;
}

double relativeMaxError(const torch::Tensor& actual, const torch::Tensor& expected) {
  return parityError(fromTorch(actual), fromTorch(expected));
}

void expectClose(const torch::Tensor& actual, const torch::Tensor& expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  if (!actual.is_floating_point()) {
    EXPECT_TRUE(torch::equal(actual, expected)) << what << "\nactual:\n" << actual << "\nexpected:\n" << expected;
    return;
  }
  double err = relativeMaxError(actual, expected);
  EXPECT_LE(err, tol) << what << ": relative max error " << err;
}

}  // namespace kiln::testing
