#include "backend/aten/torch_eager_trainer.h"

#include <cstring>
#include <vector>

#include <ATen/autocast_mode.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace kiln {
namespace {

Result<at::ScalarType> scalarType(DType d) {
  switch (d) {
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::Bool: return at::kBool;
  }
  return Error{"unknown dtype"};
}

Result<DType> kilnType(at::ScalarType s) {
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16, DType::I8,
                  DType::U8, DType::Bool}) {
    auto t = scalarType(d);
    if (t && *t == s) return d;
  }
  return Error{std::string("libtorch dtype ") + c10::toString(s) + " has no Kiln equivalent"};
}

/// A copy of `t` as a libtorch tensor (the batch must not alias Kiln's buffers).
Result<at::Tensor> toTorch(const Tensor& t) {
  auto st = scalarType(t.dtype());
  if (!st) return st.error();
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  return torch::from_blob(const_cast<void*>(t.data<void>()), shape, torch::TensorOptions().dtype(*st)).clone();
}

Result<Tensor> fromTorch(const at::Tensor& src) {
  at::Tensor t = src.detach().contiguous();
  auto dt = kilnType(t.scalar_type());
  if (!dt) return dt.error();
  Tensor out(TensorType{*dt, Shape(t.sizes().begin(), t.sizes().end())});
  if (out.bytes()) std::memcpy(out.data<void>(), t.data_ptr(), out.bytes());
  return out;
}

/// The first tensor of a forward's result, in pytree order (tensor, tuple,
/// list or dict values), like tests/train/losses.py's prediction().
std::optional<at::Tensor> firstTensor(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor();
  if (v.isTuple())
    for (const auto& e : v.toTupleRef().elements())
      if (auto t = firstTensor(e)) return t;
  if (v.isList())
    for (const c10::IValue& e : v.toListRef())
      if (auto t = firstTensor(e)) return t;
  if (v.isGenericDict())
    for (const auto& kv : v.toGenericDict())
      if (auto t = firstTensor(kv.value())) return t;
  return std::nullopt;
}

/// torch.autocast("cpu", dtype) from construction to destruction, around
/// the forward and the loss as a PyTorch user writes it (the backward and
/// the optimizer run outside). The autocast API moved in libtorch 2.4
/// (device-generic setters).
class CpuAutocast {
 public:
  explicit CpuAutocast(std::optional<at::ScalarType> dtype) : on_(dtype.has_value()) {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(at::kCPU, *dtype);
    at::autocast::set_autocast_enabled(at::kCPU, true);
#else
    at::autocast::set_autocast_cpu_dtype(*dtype);
    at::autocast::set_cpu_enabled(true);
#endif
  }
  ~CpuAutocast() {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCPU, false);
#else
    at::autocast::set_cpu_enabled(false);
#endif
    at::autocast::clear_cache();  // the casts of this step's weights
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool on_;
};

}  // namespace

struct TorchEagerTrainer::Impl {
  torch::jit::Module module;
  TrainingOptions training;
  std::vector<at::Tensor> params;  ///< the trained ones
  std::unique_ptr<torch::optim::Optimizer> opt;
  double last_loss = 0;
  std::vector<c10::IValue> inputs;
  std::optional<at::Tensor> target;
  std::optional<at::ScalarType> autocast;  ///< --amp bf16: torch.autocast("cpu", torch.bfloat16)
};

TorchEagerTrainer::TorchEagerTrainer() : impl_(std::make_unique<Impl>()) {}
TorchEagerTrainer::~TorchEagerTrainer() = default;

std::string TorchEagerTrainer::torchVersion() { return TORCH_VERSION; }

Result<std::unique_ptr<TorchEagerTrainer>> TorchEagerTrainer::create(const TorchEagerConfig& config) {
  std::unique_ptr<TorchEagerTrainer> tr(new TorchEagerTrainer());
  Impl& m = *tr->impl_;
  m.training = config.training;
  if (config.training.amp.mode == AmpMode::Fp16)
    return Error{"--amp fp16: libtorch's CPU autocast runs bfloat16 only; compare with --amp bf16"};
  if (config.training.amp.mode == AmpMode::Bf16) m.autocast = at::kBFloat16;
  if (config.num_threads > 0) at::set_num_threads(config.num_threads);
  try {
    m.module = torch::jit::load(config.model_path);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return Error{config.model_path + ": libtorch cannot load it as a TorchScript archive (" +
                 what.substr(0, what.find('\n')) + ")"};
  }
  m.module.train(true);
  for (const auto& p : m.module.named_parameters(/*recurse=*/true)) {
    bool frozen = config.training.frozen.count(p.name) > 0;
    p.value.set_requires_grad(!frozen);
    if (!frozen) m.params.push_back(p.value);
  }
  const OptimizerOptions& o = config.training.optimizer;
  const double wd = o.weightDecay();
  switch (o.kind) {
    case OptimizerKind::Sgd:
      m.opt = std::make_unique<torch::optim::SGD>(
          m.params,
          torch::optim::SGDOptions(1e-3).momentum(o.momentum).dampening(o.dampening).weight_decay(wd).nesterov(
              o.nesterov));
      break;
    case OptimizerKind::Adam:
      m.opt = std::make_unique<torch::optim::Adam>(
          m.params, torch::optim::AdamOptions(1e-3).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd));
      break;
    case OptimizerKind::AdamW:
      m.opt = std::make_unique<torch::optim::AdamW>(
          m.params, torch::optim::AdamWOptions(1e-3).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd));
      break;
    case OptimizerKind::Muon:
      return Error{"the libtorch eager trainer has no Muon (libtorch's C++ torch::optim has none); train with "
                   "Kiln's own step"};
  }
  return tr;
}

Status TorchEagerTrainer::setBatch(const TensorMap& batch) {
  Impl& m = *impl_;
  m.inputs.clear();
  m.target.reset();
  for (int i = 0;; ++i) {
    auto it = batch.find("input" + std::to_string(i));
    if (it == batch.end()) break;
    auto t = toTorch(it->second);
    if (!t) return t.error();
    m.inputs.emplace_back(*t);
  }
  if (auto it = batch.find("target"); it != batch.end()) {
    auto t = toTorch(it->second);
    if (!t) return t.error();
    m.target = *t;
  }
  return {};
}

Status TorchEagerTrainer::step(double lr) {
  Impl& m = *impl_;
  const std::optional<at::Tensor>& target = m.target;
  if (m.training.loss != LossKind::Model && !target) return Error{"libtorch step: the batch has no target"};
  try {
    for (auto& group : m.opt->param_groups()) group.options().set_lr(lr);
    m.opt->zero_grad();
    std::optional<CpuAutocast> autocast(std::in_place, m.autocast);  // forward and loss
    auto pred = firstTensor(m.module.forward(m.inputs));
    if (!pred) return Error{"libtorch: the model returned no tensor"};
    at::Tensor loss;
    switch (m.training.loss) {
      case LossKind::Model: loss = *pred; break;
      case LossKind::Mse: loss = torch::mse_loss(*pred, *target); break;
      case LossKind::L1: loss = torch::l1_loss(*pred, *target); break;
      case LossKind::SmoothL1: loss = torch::smooth_l1_loss(*pred, *target); break;
      case LossKind::Huber: loss = torch::huber_loss(*pred, *target); break;
      case LossKind::Bce: loss = torch::binary_cross_entropy_with_logits(*pred, *target); break;
      case LossKind::KlDiv:
        loss = torch::nn::functional::kl_div(torch::log_softmax(*pred, -1), *target,
                                             torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
        break;
      case LossKind::CrossEntropy: {
        // The layout rule of passes/loss.h: classes last when the target is
        // the logits' shape without its last dim (language models).
        auto ls = pred->sizes(), ts = target->sizes();
        bool classes_last = ls.size() >= 2 && ts.equals(ls.slice(0, ls.size() - 1));
        const CrossEntropyOptions& ce = m.training.cross_entropy;
        auto options = torch::nn::functional::CrossEntropyFuncOptions()
                           .ignore_index(ce.ignore_index)
                           .label_smoothing(ce.label_smoothing);
        if (!ce.class_weights.empty())
          options.weight(torch::tensor(ce.class_weights, torch::kFloat64).to(pred->scalar_type()));
        loss = classes_last
                   ? torch::nn::functional::cross_entropy(pred->reshape({-1, ls.back()}), target->reshape(-1), options)
                   : torch::nn::functional::cross_entropy(*pred, *target, options);
        break;
      }
    }
    autocast.reset();
    loss.backward();
    if (m.training.optimizer.clip_grad_norm > 0)
      torch::nn::utils::clip_grad_norm_(m.params, m.training.optimizer.clip_grad_norm);
    m.opt->step();
    m.last_loss = loss.item<double>();
  } catch (const std::exception& e) {
    std::string what = e.what();
    return Error{"libtorch step: " + what.substr(0, what.find('\n'))};
  }
  return {};
}

double TorchEagerTrainer::lastLoss() const { return impl_->last_loss; }

TensorMap TorchEagerTrainer::stateDict() const {
  TensorMap sd;
  for (const auto& p : impl_->module.named_parameters(true))
    if (auto t = fromTorch(p.value)) sd[p.name] = std::move(*t);
  for (const auto& b : impl_->module.named_buffers(true))
    if (auto t = fromTorch(b.value)) sd[b.name] = std::move(*t);
  return sd;
}

}  // namespace kiln
