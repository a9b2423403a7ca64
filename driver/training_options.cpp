#include "driver/training_options.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "backend/comm/communicator.h"
#include "backend/lr_schedule.h"
#include "core/safetensors.h"
#include "driver/byte_size.h"

namespace kiln::driver {
namespace {

/// --class-weights FILE: a safetensors file holding one 1-D tensor, or a
/// text file of numbers (whitespace or commas between them).
Result<std::vector<double>> readClassWeights(const std::string& path) {
  const std::string what = "--class-weights " + path;
  std::vector<double> w;
  if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
    auto file = readSafetensors(path);
    if (!file) return Error{what + ": " + file.error().message};
    if (file->tensors.size() != 1 || file->tensors.begin()->second.rank() != 1)
      return Error{what + ": expected one 1-D tensor of class weights, the file holds " +
                   std::to_string(file->tensors.size()) + " tensors"};
    const Tensor& t = file->tensors.begin()->second;
    for (int64_t k = 0; k < t.numel(); ++k) w.push_back(t.at(k));
  } else {
    std::ifstream in(path);
    if (!in) return Error{what + ": cannot read the file"};
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (char& c : text)
      if (c == ',') c = ' ';
    std::istringstream words(text);
    std::string word;
    while (words >> word) {
      char* end = nullptr;
      const double v = std::strtod(word.c_str(), &end);
      if (end == word.c_str() || *end) return Error{what + ": '" + word + "' is not a number"};
      w.push_back(v);
    }
  }
  if (w.empty()) return Error{what + ": no weights in the file"};
  for (double v : w)
    if (!std::isfinite(v) || v < 0) return Error{what + ": weights must be finite and >= 0, got " + std::to_string(v)};
  return w;
}

}  // namespace

namespace {
/// A number as a user wrote it: 1e+09, 0.5, -1 (not std::to_string's 1000000000.000000).
std::string shortNumber(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
}  // namespace

Status validateOptions(const CompileOptions& a) {
  auto bad = [](const std::string& m) { return Status(Error{m}); };
  if (!parseLossKind(a.loss))
    return bad("unknown loss '" + a.loss + "'; use cross_entropy, mse, l1, smooth_l1, huber, bce, kl_div or model");
  if (!parseOptimizerKind(a.optimizer))
    return bad("unknown optimizer '" + a.optimizer + "'; use sgd, adam, adamw or muon");
  if (a.loss != "cross_entropy" && (a.label_smoothing != 0 || a.ignore_index != -100 || !a.class_weights.empty()))
    return bad("--label-smoothing, --ignore-index and --class-weights need --loss cross_entropy");
  if (!(a.label_smoothing >= 0 && a.label_smoothing <= 1))
    return bad("--label-smoothing must be in [0, 1], got " + shortNumber(a.label_smoothing));
  if (!parseAmpMode(a.amp)) return bad("unknown --amp '" + a.amp + "'; use none, bf16 or fp16");
  if (!parseLrScheduleKind(a.lr_schedule))
    return bad("unknown learning-rate schedule '" + a.lr_schedule + "'; use constant or warmup_cosine");
  auto nonneg = [&](double v, const char* what) -> Status {
    if (!std::isfinite(v) || v < 0)
      return bad(std::string(what) + " must be a finite number >= 0, got " + shortNumber(v));
    return {};
  };
  for (auto [v, what] : {std::pair{a.lr, "--lr"},
                         {a.momentum, "--momentum"},
                         {a.dampening, "--dampening"},
                         {a.eps, "--eps"},
                         {a.clip_grad_norm, "--clip-grad-norm"},
                         {a.min_lr, "--min-lr"},
                         {a.muon_lr, "--muon-lr"},
                         {a.muon_weight_decay, "--muon-weight-decay"},
                         {a.weight_decay.value_or(0), "--weight-decay"}})
    if (Status s = nonneg(v, what); !s) return s;
  if (!(a.beta1 >= 0 && a.beta1 < 1) || !(a.beta2 >= 0 && a.beta2 < 1))
    return bad("--beta1 and --beta2 must be in [0, 1)");
  if (!(a.muon_momentum >= 0 && a.muon_momentum < 1)) return bad("--muon-momentum must be in [0, 1)");
  if (a.optimizer == "muon" && a.zero != 0)
    return bad("--zero 1 with --optimizer muon is not supported (Muon's matrices are not sharded)");
  if (a.nesterov && (a.momentum <= 0 || a.dampening != 0))
    return bad("--nesterov needs --momentum > 0 and --dampening 0 (as torch.optim.SGD)");
  if (a.steps < 0 || a.warmup_steps < 0 || a.batch < 0 || a.seq_len < 0 || a.prefetch < 0)
    return bad("--steps, --warmup-steps, --batch, --seq-len and --prefetch must be >= 0");
  if (!a.model.input_file.empty() && !a.data.empty()) return bad("give either --input-file or --data, not both");
  if (!a.memory_budget.empty())
    if (auto b = parseByteSize(a.memory_budget); !b) return bad("--memory-budget: " + b.error().message);
  if (a.nproc < 1 || a.nproc > kMaxRanks)
    return bad("--nproc must be between 1 and " + std::to_string(kMaxRanks) + ", got " + std::to_string(a.nproc));
  if (a.nnodes < 1 || a.nnodes > kMaxRanks)
    return bad("--nnodes must be between 1 and " + std::to_string(kMaxRanks) + ", got " + std::to_string(a.nnodes));
  if (static_cast<int64_t>(a.nnodes) * a.nproc > kMaxRanks)
    return bad("--nnodes x --nproc is " + std::to_string(int64_t{a.nnodes} * a.nproc) + " ranks, more than " +
               std::to_string(kMaxRanks));
  if (a.node_rank < 0 || a.node_rank >= a.nnodes)
    return bad("--node-rank must be between 0 and --nnodes - 1 (" + std::to_string(a.nnodes - 1) + "), got " +
               std::to_string(a.node_rank));
  if (a.master_port < 0 || a.master_port > 65535)
    return bad("--master-port must be a port number (1..65535), got " + std::to_string(a.master_port));
  if (a.nnodes > 1 && (a.master_addr.empty() || a.master_port == 0))
    return bad("--nnodes " + std::to_string(a.nnodes) +
               " needs --master-addr (node 0's address) and --master-port, the same on every machine");
  if (a.threads < 0 || a.threads > kMaxThreads)
    return bad("--threads must be between 0 (all cores) and " + std::to_string(kMaxThreads) + ", got " +
               std::to_string(a.threads));
  if (auto b = parseByteSize(a.bucket_size); !b) return bad("--bucket-size: " + b.error().message);
  for (auto [flag, seconds] : {std::pair{"--comm-timeout", a.comm_timeout},
                                std::pair{"--rendezvous-timeout", a.rendezvous_timeout},
                                std::pair{"--checkpoint-timeout", a.checkpoint_timeout}})
    if (seconds != 0 && !(seconds >= CommOptions::kMinTimeoutSeconds && seconds <= CommOptions::kMaxTimeoutSeconds))
      return bad(std::string(flag) + " must be between 0.001 and 604800 seconds (a week), got " + shortNumber(seconds));
  if (!(a.ema >= 0 && a.ema < 1)) return bad("--ema must be a decay in (0, 1) (0: off), got " + shortNumber(a.ema));
  if (a.eval_every < 0) return bad("--eval-every must be >= 0");
  if (!(a.selective_backprop >= 0 && a.selective_backprop < 1))
    return bad("--selective-backprop must be a fraction in (0, 1) (0: off), got " + shortNumber(a.selective_backprop));
  if (a.image_size < 0 || a.image_size > 65536) return bad("--image-size must be between 1 and 65536 (0: as read)");
  if (a.eval_data.empty() && (a.eval_every > 0 || a.target || !a.metric.empty()))
    return bad("--eval-every, --metric and --target need --eval-data (the held-out set the metric is measured on)");
  if (a.target && !std::isfinite(*a.target)) return bad("--target must be a finite number");
  if (!a.save_ema.empty() && a.ema == 0) return bad("--save-ema needs --ema DECAY");
  if (a.zero != 0 && a.zero != 1) return bad("--zero must be 0 or 1 (stage 1 shards the optimizer state)");
  if (a.zero == 1 && a.amp == "fp16")
    return bad(
        "--zero 1 with --amp fp16 is not supported (its loss scaling checks every gradient for overflow on "
        "one rank); use --amp bf16");
  return {};
}

Result<TrainingOptions> trainingOptions(const CompileOptions& a, int ranks, int rank) {
  TrainingOptions to;
  to.loss = *parseLossKind(a.loss);
  to.cross_entropy.label_smoothing = a.label_smoothing;
  to.cross_entropy.ignore_index = a.ignore_index;
  if (!a.class_weights.empty()) {
    auto w = readClassWeights(a.class_weights);
    if (!w) return w.error();
    to.cross_entropy.class_weights = std::move(*w);
  }
  OptimizerOptions& o = to.optimizer;
  o.kind = *parseOptimizerKind(a.optimizer);
  o.beta1 = a.beta1;
  o.beta2 = a.beta2;
  o.eps = a.eps;
  o.momentum = a.momentum;
  o.dampening = a.dampening;
  o.nesterov = a.nesterov;
  o.weight_decay = a.weight_decay;
  o.clip_grad_norm = a.clip_grad_norm;
  o.muon_momentum = a.muon_momentum;
  o.muon_weight_decay = a.muon_weight_decay;
  to.ema_decay = a.ema;
  to.amp.mode = *parseAmpMode(a.amp);
  if (!a.memory_budget.empty()) to.memory_budget = *parseByteSize(a.memory_budget);
  if (ranks > 1) {
    DataParallelOptions& dp = to.data_parallel;
    dp.world_size = ranks;
    dp.bucket_bytes = *parseByteSize(a.bucket_size);
    dp.sparse_patterns = a.sparse_grads;
    dp.sparse_embeddings = !a.dense_embeddings;
    dp.zero_stage = a.zero;
    dp.rank = rank;
  }
  return to;
}

}  // namespace kiln::driver
