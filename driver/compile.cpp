#include "driver/compile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <optional>

#include "backend/comm/collective_engine.h"
#include "backend/cpu/cpu_features.h"
#include "driver/step_cache.h"
#include "core/data/shard_source.h"
#include "core/import/loader/load_model.h"
#include "core/safetensors.h"
#include "core/verifier.h"
#include "passes/freeze.h"
#include "driver/byte_size.h"

namespace kiln::driver {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

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

Status validate(const CompileOptions& a) {
  auto bad = [](const std::string& m) { return Status(Error{m}); };
  if (!parseLossKind(a.loss)) return bad("unknown loss '" + a.loss + "'; use cross_entropy, mse, l1, smooth_l1, huber, bce, kl_div or model");
  if (!parseOptimizerKind(a.optimizer)) return bad("unknown optimizer '" + a.optimizer + "'; use sgd, adam or adamw");
  if (a.loss != "cross_entropy" && (a.label_smoothing != 0 || a.ignore_index != -100 || !a.class_weights.empty()))
    return bad("--label-smoothing, --ignore-index and --class-weights need --loss cross_entropy");
  if (!(a.label_smoothing >= 0 && a.label_smoothing <= 1))
    return bad("--label-smoothing must be in [0, 1], got " + std::to_string(a.label_smoothing));
  if (!parseAmpMode(a.amp)) return bad("unknown --amp '" + a.amp + "'; use none, bf16 or fp16");
  if (!parseLrScheduleKind(a.lr_schedule))
    return bad("unknown learning-rate schedule '" + a.lr_schedule + "'; use constant or warmup_cosine");
  auto nonneg = [&](double v, const char* what) -> Status {
    if (!std::isfinite(v) || v < 0)
      return bad(std::string(what) + " must be a finite number >= 0, got " + std::to_string(v));
    return {};
  };
  for (auto [v, what] : {std::pair{a.lr, "--lr"},
                         {a.momentum, "--momentum"},
                         {a.dampening, "--dampening"},
                         {a.eps, "--eps"},
                         {a.clip_grad_norm, "--clip-grad-norm"},
                         {a.min_lr, "--min-lr"},
                         {a.weight_decay.value_or(0), "--weight-decay"}})
    if (Status s = nonneg(v, what); !s) return s;
  if (!(a.beta1 >= 0 && a.beta1 < 1) || !(a.beta2 >= 0 && a.beta2 < 1))
    return bad("--beta1 and --beta2 must be in [0, 1)");
  if (a.nesterov && (a.momentum <= 0 || a.dampening != 0))
    return bad("--nesterov needs --momentum > 0 and --dampening 0 (as torch.optim.SGD)");
  if (a.steps < 0 || a.warmup_steps < 0 || a.batch < 0 || a.seq_len < 0 || a.prefetch < 0)
    return bad("--steps, --warmup-steps, --batch, --seq-len and --prefetch must be >= 0");
  if (!a.model.input_file.empty() && !a.data.empty()) return bad("give either --input-file or --data, not both");
  if (!a.memory_budget.empty())
    if (auto b = parseByteSize(a.memory_budget); !b) return bad("--memory-budget: " + b.error().message);
  if (a.nproc < 0) return bad("--nproc must be >= 1");
  if (auto b = parseByteSize(a.bucket_size); !b) return bad("--bucket-size: " + b.error().message);
  if (a.comm_timeout < 0 || !std::isfinite(a.comm_timeout)) return bad("--comm-timeout must be > 0 seconds");
  if (a.zero != 0 && a.zero != 1) return bad("--zero must be 0 or 1 (stage 1 shards the optimizer state)");
  if (a.zero == 1 && a.amp == "fp16")
    return bad(
        "--zero 1 with --amp fp16 is not supported (its loss scaling checks every gradient for overflow on "
        "one rank); use --amp bf16");
  return {};
}

Result<Model> importWith(const CompileOptions& a, std::vector<TensorType> types) {
  ImportOptions opts;
  opts.training = true;
  opts.input_types = std::move(types);
  auto model = loadModel(a.model.path, opts);
  if (!model) return model;
  if (Status s = verify(model->graph); !s)
    return Error{a.model.path + ": imported graph is invalid (a Kiln bug): " + s.error().message};
  return model;
}

/// Data input types from --input-shape, else what the archive records.
Result<std::vector<TensorType>> declaredTypes(const CompileOptions& a) {
  std::vector<TensorType> types;
  ModelArgs m = a.model;
  m.input_file.clear();
  m.train = true;
  auto model = loadAndVerify(m);
  if (!model) return model.error();
  for (const Value* v : model->graph.inputs())
    if (v->role() == ValueRole::Data) types.push_back(v->type());
  return types;
}

std::vector<TensorType> typesOf(const TensorMap& batch) {
  std::vector<TensorType> t;
  for (size_t i = 0;; ++i) {
    auto it = batch.find("input" + std::to_string(i));
    if (it == batch.end()) return t;
    t.push_back(it->second.type());
  }
}

/// How large random integers may be for each data input: class count for
/// the target, rows of the embedding an input indexes, else 2.
int64_t syntheticHigh(const Value* v) {
  for (const Use& u : v->uses()) {
    const Node* n = u.user;
    if (n->op() == "embedding" && u.index == 1) return n->input(0)->shape()[0];
    if (n->op() == "cross_entropy" && u.index == 1)
      return n->input(0)->shape().size() == 1 ? n->input(0)->shape()[0] : n->input(0)->shape()[1];
    if (n->op() == "reshape" || n->op() == "cast")
      if (int64_t h = syntheticHigh(n->output()); h != 2) return h;
  }
  return 2;
}

}  // namespace

void addCompileOptions(CLI::App* sub, CompileOptions& a, bool with_optimizer) {
  sub->add_option("model", a.model.path, "TorchScript archive (.pt, traced in train mode) or FX dump (.fx.json)")
      ->required();
  sub->add_option("--input-file", a.model.input_file,
                  "batch (safetensors): input0, input1, ... and target; used for every step");
  sub->add_option("--input-shape", a.model.input_shapes,
                  "data input type for synthetic batches, e.g. 8x32 or i64[2,16]");
  sub->add_option("--loss", a.loss,
                  "cross_entropy (class-index target), mse, l1, smooth_l1, huber, bce (with logits; targets in "
                  "[0, 1]), kl_div (target: a distribution over the last dim; distillation), or model (output 0 "
                  "is the loss)");
  sub->add_option("--label-smoothing", a.label_smoothing,
                  "cross_entropy: mix the target with a uniform distribution over the classes (F.cross_entropy's "
                  "label_smoothing, default 0)");
  sub->add_option("--ignore-index", a.ignore_index,
                  "cross_entropy: targets with this class count neither in the loss nor in its mean (default -100)");
  sub->add_option("--class-weights", a.class_weights,
                  "cross_entropy: one weight per class, from a safetensors file holding one 1-D tensor or a text "
                  "file of numbers (F.cross_entropy's weight)");
  sub->add_option("--freeze", a.freeze,
                  "train no parameter matching this glob on state_dict names; without * ? [ a name or module "
                  "prefix (layer1 freezes layer1.0.conv1.weight) (repeatable)");
  sub->add_option("--amp", a.amp,
                  "mixed precision: bf16 or fp16 (matmul/linear/conv in low precision, f32 master weights; fp16 "
                  "with dynamic loss scaling when training), or none (default)");
  sub->add_option("--seed", a.seed, "seed for synthetic batches and random ops (dropout)");
  sub->add_option("--threads", a.threads, "CPU threads (0: all cores)");
  sub->add_option("--device", a.device, "cpu (default) or cuda (the CUDA plugin; state stays on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--dialects", a.dialects,
                  "kernel dialects to use, best first, e.g. onednn,blas,cpu (default: all, by priority; kiln ops "
                  "lists each op's kernels)");
  sub->add_flag("--autotune", a.autotune,
                "time every applicable kernel on the real shapes and keep the fastest (kept in the report and the "
                "compile cache)");
  sub->add_flag("--serial-nodes", a.serial_nodes,
                "run one node at a time, threads only inside ops (default: small independent nodes run side by side)");
  sub->add_flag("--verbose,-v", a.verbose, "print the passes and full error messages");
  addPassFlags(sub, a.pass_flags, "run these passes (a,b,c) instead of the default pipeline (kiln passes)");
  sub->add_option("--memory-budget", a.memory_budget,
                  "fit the step's peak memory (weights, optimizer state, batch and intermediates) in this many "
                  "bytes, e.g. 2GiB or 512MiB, by recomputing activations in the backward (remat)");
  sub->add_option("--nproc", a.nproc,
                  "data parallel: start this many ranks (processes talking through Gloo on 127.0.0.1); each "
                  "trains on its 1/N slice of every batch, gradients are averaged as in PyTorch DDP. Also runs as "
                  "one rank under an external launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
  sub->add_option("--bucket-size", a.bucket_size,
                  "data parallel: gradient bytes per allreduce bucket (default 25MiB, as DDP)");
  sub->add_option("--sparse-grads", a.sparse_grads,
                  "data parallel: allreduce these parameters' gradients block-sparse (only non-zero rows travel); "
                  "patterns as --freeze; embedding gradients are sparse anyway (repeatable)");
  sub->add_flag("--dense-embeddings", a.dense_embeddings, "data parallel: allreduce embedding gradients densely too");
  sub->add_option("--comm-timeout", a.comm_timeout,
                  "data parallel: seconds a rank waits for the others before it fails (default 60)");
  sub->add_flag("--no-cache", a.no_cache, "neither read nor write the compile cache (kiln cache)");
  sub->add_option("--cache-dir", a.cache_dir,
                  "compile cache directory (default: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)");
  if (!with_optimizer) return;
  sub->add_option("--zero", a.zero,
                  "data parallel: ZeRO stage; 1 shards the optimizer state (each rank keeps and updates the state of "
                  "its share of the parameters; gradients are reduce-scattered, parameters all-gathered), with the "
                  "same results as plain data parallel");
  sub->add_option("--data", a.data,
                  "a directory of safetensors batches (cycled), or a flat binary token file (language models)");
  sub->add_option("--token-type", a.token_type, "token file id type: u16 (default), i32 or i64");
  sub->add_option("--seq-len", a.seq_len, "token window length (default: the model's input length)");
  sub->add_option("--batch", a.batch, "batch size of synthetic or token batches (default: the model's)");
  sub->add_option("--optimizer", a.optimizer, "sgd, adam or adamw (default)");
  sub->add_option("--lr", a.lr, "learning rate (default 1e-3)");
  sub->add_option("--momentum", a.momentum, "SGD momentum (default 0)");
  sub->add_option("--dampening", a.dampening, "SGD dampening (default 0)");
  sub->add_flag("--nesterov", a.nesterov, "SGD with Nesterov momentum");
  sub->add_option("--weight-decay", a.weight_decay, "weight decay (default: 0 for sgd/adam, 0.01 for adamw)");
  sub->add_option("--beta1", a.beta1, "Adam beta1 (default 0.9)");
  sub->add_option("--beta2", a.beta2, "Adam beta2 (default 0.999)");
  sub->add_option("--eps", a.eps, "Adam epsilon (default 1e-8)");
  sub->add_option("--clip-grad-norm", a.clip_grad_norm, "clip the global gradient norm to this (0: off)");
  sub->add_option("--lr-schedule", a.lr_schedule, "constant (default) or warmup_cosine");
  sub->add_option("--warmup-steps", a.warmup_steps, "linear warm-up steps of warmup_cosine");
  sub->add_option("--min-lr", a.min_lr, "learning rate at the end of the cosine decay");
  sub->add_option("--steps", a.steps, "train until this many steps are done (default 10)");
  sub->add_option("--prefetch", a.prefetch,
                  "read this many batches ahead on a thread of their own (default 2; 0: in the step's thread)");
}

namespace {

/// Whether this run reads and writes the compile cache: not with --no-cache,
/// nor when the user asked to watch the passes run (IR printing, dumps,
/// the report's pass IR).
bool cacheEnabled(const CompileOptions& a) {
  const PassFlags& f = a.pass_flags;
  return !a.no_cache && !a.keep_pass_ir && f.print_ir_after.empty() && !f.print_ir_after_change && f.dump_dir.empty();
}

void warnOnce(BoundStep& setup, const std::string& problem) {
  if (!setup.cache.problem.empty()) return;
  setup.cache.problem = problem;
  std::cerr << "kiln: warning: " << problem << "\n";
}

/// The Data inputs of a compiled step but the target, in order (input0, ...).
std::vector<TensorType> modelInputTypes(const Graph& g) {
  std::vector<TensorType> out;
  for (const Value* v : g.inputs())
    if (v->role() == ValueRole::Data && v->name() != "target") out.push_back(v->type());
  return out;
}

Result<BoundStep> setUp(const CompileOptions& a, TrainingGraphKind kind, bool lookup, std::string problem) {
  if (Status s = validate(a); !s) return s.error();
  auto pipeline = checkPassFlags(a.pass_flags);  // before the import: a typo fails fast
  if (!pipeline) return pipeline.error();
  BoundStep setup;
  setup.cache.problem = std::move(problem);
  auto t0 = Clock::now();

  // 1. Batches read from files, and the data types they imply.
  TensorMap first;
  std::vector<TensorType> types;
  std::string token_file;
  bool types_from_batch = false;
  // kiln compile / memory --nproc N: one rank's step, compiled without peers.
  const int ranks = a.collectives ? a.collectives->size() : a.compile_only ? std::max(a.nproc, 1) : 1;
  const int rank = a.collectives ? a.collectives->rank() : 0;
  if (a.nproc > 1 && !a.collectives && !a.compile_only)
    return Error{"--nproc starts ranks for kiln train and kiln grad only"};
  if (!a.model.input_file.empty()) {
    auto f = readSafetensors(a.model.input_file);
    if (!f) return f.error();
    auto part = shardBatch(f->tensors, rank, ranks, a.model.input_file);
    if (!part) return part.error();
    first = std::move(*part);
    types = typesOf(first);
    if (types.empty())
      return Error{a.model.input_file + ": holds no tensor named input0 (inputs are keyed input0, input1, ...)"};
    setup.batches = fixedBatchSource(first, a.model.input_file);
    setup.batch_where = a.model.input_file;
    types_from_batch = true;
  } else if (!a.data.empty() && std::filesystem::is_directory(a.data)) {
    auto src = safetensorsDirSource(a.data);
    if (!src) return src.error();
    *src = shardedSource(std::move(*src), rank, ranks);
    auto b = (*src)->batch(0);
    if (!b) return b.error();
    first = std::move(*b);
    types = typesOf(first);
    if (types.empty()) return Error{a.data + ": the first batch holds no tensor named input0"};
    setup.batches = std::move(*src);
    setup.batch_where = a.data;
    types_from_batch = true;
  } else if (!a.data.empty()) {
    if (!std::filesystem::exists(a.data)) return Error{a.data + ": no such file or directory"};
    token_file = a.data;
  }

  // 2. The compile cache: a step compiled before with the same inputs.
  std::optional<CachedStep> cached;
  std::string material;
  std::optional<CompileCache> cache;
  if (cacheEnabled(a)) {
    auto m = stepCacheKeyMaterial(a, kind, first);
    if (m) {  // else an unreadable model: the import below says why
      cache.emplace(a.cache_dir.empty() ? CompileCache::defaultDir() : a.cache_dir);
      material = std::move(*m);
    }
  }
  if (cache) {
    setup.cache.dir = cache->dir();
    setup.cache.key = stepCacheKey(material);
    setup.cache.entry = cache->entryPath(setup.cache.key);
    if (lookup) {
      auto t = Clock::now();
      CacheLookup found = cache->load(setup.cache.key);
      if (!found.problem.empty()) {
        warnOnce(setup, found.problem);
        cache->count("corrupt");
      }
      if (found.payload) {
        auto step = decodeStep(*found.payload);
        if (step) {
          cached = std::move(*step);
        } else {
          std::error_code ec;
          std::filesystem::remove(setup.cache.entry, ec);
          warnOnce(setup, "cache entry " + setup.cache.entry + " is unusable (" + step.error().message +
                              "); removed, rebuilding");
          cache->count("corrupt");
        }
      }
      setup.cache.load_ms = msSince(t);
    }
  }

  // 3. Types of synthetic and token batches: the compiled step's, else the model's.
  if (!types_from_batch) {
    if (cached) {
      types = modelInputTypes(cached->step.graph);
    } else {
      auto declared = declaredTypes(a);
      if (!declared) return declared.error();
      types = std::move(*declared);
      if (types.empty()) return Error{a.model.path + ": the model has no data inputs to feed"};
      if (a.batch > 0)
        for (auto& t : types)
          if (!t.shape.empty()) t.shape[0] = a.batch;
      for (auto& t : types) {  // each rank's part of the batch
        if (ranks <= 1 || t.shape.empty()) continue;
        if (t.shape[0] % ranks)
          return Error{"a batch of " + std::to_string(t.shape[0]) + " cannot be split evenly between " +
                       std::to_string(ranks) + " ranks (give --batch divisible by --nproc)"};
        t.shape[0] /= ranks;
      }
    }
    if (!token_file.empty()) {
      if (types.size() != 1 || types[0].shape.size() != 2 || !isIntegral(types[0].dtype))
        return Error{"--data " + token_file + ": token files feed models with one integer input [batch, seq]; " +
                     a.model.path + " takes " + std::to_string(types.size()) + " input(s), the first " +
                     types[0].str()};
      if (a.seq_len > 0 && !cached) types[0].shape[1] = a.seq_len;
      types[0].dtype = DType::I64;
      auto src = tokenFileSource(token_file, a.token_type, types[0].shape[0] * ranks, types[0].shape[1]);
      if (!src) return src.error();
      setup.batches = shardedSource(std::move(*src), rank, ranks);
      setup.batch_where = token_file;
    }
  }

  // 4. The model: its weights (not needed to only compile from the cache).
  Model model;
  model.source = a.model.path;
  if (!(cached && a.compile_only)) {
    auto m = importWith(a, types);
    if (!m) return m.error();
    model = std::move(*m);
  }
  setup.import_ms = msSince(t0);

  // 5. The training configuration.
  TrainingConfig cfg;
  TrainingOptions& to = cfg.passes.training;
  to.loss = *parseLossKind(a.loss);
  to.cross_entropy.label_smoothing = a.label_smoothing;
  to.cross_entropy.ignore_index = a.ignore_index;
  if (!a.class_weights.empty()) {
    auto w = readClassWeights(a.class_weights);
    if (!w) return w.error();
    to.cross_entropy.class_weights = *w;
    Tensor t(DType::F32, {static_cast<int64_t>(w->size())});
    for (size_t k = 0; k < w->size(); ++k) t.set(static_cast<int64_t>(k), (*w)[k]);
    model.weights[kClassWeightsInput] = std::move(t);
  }
  if (auto it = first.find("target"); it != first.end()) to.target = it->second.type();
  if (!token_file.empty()) to.target = TensorType{DType::I64, types[0].shape};
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
  to.amp.mode = *parseAmpMode(a.amp);
  if (to.amp.mode == AmpMode::Bf16 && a.device != "cuda" && !cpu::cpuHasNativeBf16()) {
    static bool said = false;  // once per process (a stale cache entry sets up twice)
    if (!said)
      std::cerr << "kiln: note: this CPU has no bf16 instructions (AVX512_BF16 or AMX): --amp bf16 rounds like "
                   "bf16 but is emulated, not faster than f32\n";
    said = true;
  }
  to.amp.loss_scaling = kind == TrainingGraphKind::Step;  // kiln grad has no optimizer to unscale
  if (!a.memory_budget.empty()) to.memory_budget = *parseByteSize(a.memory_budget);
  if (cached) {
    to.frozen = cached->frozen;
  } else if (!a.freeze.empty()) {
    std::vector<std::string> params;
    for (const Value* v : model.graph.inputs())
      if (v->role() == ValueRole::Param) params.push_back(v->name());
    auto frozen = resolveFreezePatterns(a.freeze, params, model.aliases);
    if (!frozen) return Error{a.model.path + ": " + frozen.error().message};
    to.frozen = std::move(*frozen);
    // Autodiff differentiates every parameter; only the freeze pass drops the frozen ones' work.
    auto isFreeze = [](const PassInfo* p) { return std::string_view(p->name) == "freeze"; };
    if (!pipeline->empty() && std::ranges::none_of(*pipeline, isFreeze))
      return Error{
          "--freeze needs the freeze pass in --passes (after autodiff, e.g. loss,autodiff,optimizer,freeze,dce)"};
  }
  cfg.lr = a.lr;
  cfg.schedule.kind = *parseLrScheduleKind(a.lr_schedule);
  cfg.schedule.warmup_steps = a.warmup_steps;
  cfg.schedule.total_steps = a.steps;
  cfg.schedule.min_lr = a.min_lr;
  cfg.seed = a.seed;
  cfg.num_threads = a.threads;
  cfg.concurrent_nodes = !a.serial_nodes;
  cfg.device = a.device;
  std::vector<std::string> known_dialects = KernelRegistry::cpu().dialects();
  if (a.device == "cuda") {
    auto backend = cudaBackend();
    if (!backend) return backend.error();
    known_dialects = (*backend)->dialects();
  }
  auto dialects = parseDialectOrder(a.dialects, known_dialects);
  if (!a.dialects.empty() && !dialects) return dialects.error();
  if (!a.dialects.empty()) cfg.kernels.dialects = std::move(*dialects);
  cfg.kernels.autotune = a.autotune;
  if (cached && a.autotune) {  // the times measured when it was compiled: do not time again
    cfg.kernels.fixed_kernels = cached->kernels;
    cfg.kernels.fixed_timings = cached->timings;
  }
  if (ranks > 1) {
    DataParallelOptions& dp = to.data_parallel;
    dp.world_size = ranks;
    dp.bucket_bytes = *parseByteSize(a.bucket_size);
    dp.sparse_patterns = a.sparse_grads;
    dp.sparse_embeddings = !a.dense_embeddings;
    dp.zero_stage = a.zero;
    dp.rank = a.collectives ? a.collectives->rank() : 0;
    cfg.collectives = a.collectives;  // nullptr when only compiling
    cfg.local_rank = a.local_rank;
    auto isDp = [](const PassInfo* p) { return std::string_view(p->name) == "data_parallel"; };
    if (!pipeline->empty() && std::ranges::none_of(*pipeline, isDp))
      return Error{
          "--nproc needs the data_parallel pass in --passes (after autodiff, e.g. "
          "loss,autodiff,data_parallel,optimizer)"};
  }
  cfg.pipeline = std::move(*pipeline);
  cfg.pass_options = passManagerOptions(a.pass_flags, &std::cout);
  cfg.pass_options.keep_ir = a.keep_pass_ir;
  cfg.pass_options.progress = a.pass_progress;
  cfg.compile_only = a.compile_only;

  // 6. Compile the step (or take the cached one) and bind kernels.
  auto t1 = Clock::now();
  auto session = TrainingSession::create(model, cfg, kind, cached ? &cached->step : nullptr);
  if (cached) {
    Status bound = session ? checkBinding(**session, *cached) : Status(session.error());
    if (!bound) {  // a stale entry: compile afresh and replace it
      std::error_code ec;
      std::filesystem::remove(setup.cache.entry, ec);
      cache->count("corrupt");
      std::string why =
          "cache entry " + setup.cache.entry + " is stale (" + bound.error().message + "); removed, rebuilding";
      std::cerr << "kiln: warning: " << why << "\n";
      return setUp(a, kind, false, setup.cache.problem.empty() ? why : setup.cache.problem);
    }
  }
  if (!session) return Error{a.model.path + ": " + session.error().message};
  setup.session = std::move(*session);
  setup.compile_ms = msSince(t1);
  for (const Value* v : setup.session->graph().inputs())
    if (v->role() == ValueRole::Param && !to.frozen.count(v->name()))
      setup.num_params += static_cast<size_t>(v->type().numel());
  if (cache) {
    if (cached) {
      setup.cache.status = "hit";
      cache->count("hit");
    } else {
      setup.cache.status = setup.cache.problem.empty() ? "miss" : "rebuilt";
      cache->count("miss");
      if (Status st = cache->store(setup.cache.key, encodeStep(*setup.session, a.model.path, material)); !st)
        std::cerr << "kiln: warning: could not write the compile cache (" << st.error().message << ")\n";
    }
  }

  if (!setup.batches) {
    std::vector<SyntheticSpec> specs;
    // The whole batch from the seed, then this rank's part: N ranks train on
    // what one process would.
    for (const Value* v : setup.session->batchInputs()) {
      TensorType whole = v->type();
      if (!whole.shape.empty()) whole.shape[0] *= ranks;
      SyntheticSpec spec{v->name(), whole, syntheticHigh(v)};
      if (v->name() == "target" && a.loss == "bce") spec.floats = SyntheticSpec::Floats::Unit;
      if (v->name() == "target" && a.loss == "kl_div") spec.floats = SyntheticSpec::Floats::Distribution;
      specs.push_back(std::move(spec));
    }
    setup.batches = shardedSource(syntheticSource(std::move(specs), a.seed), rank, ranks);
    setup.batch_where = "synthetic batch";
  }
  if (a.prefetch > 0 && !a.compile_only)
    setup.batches = prefetchingSource(std::move(setup.batches), a.prefetch, a.trace);
  auto b0 = setup.batches->batch(0);
  if (!b0) return b0.error();
  if (Status s = setup.session->checkBatch(*b0, setup.batch_where); !s) return s.error();
  return setup;
}

}  // namespace

Result<BoundStep> compileStep(const CompileOptions& a, TrainingGraphKind kind) {
  return setUp(a, kind, true, {});
}

}  // namespace kiln::driver
