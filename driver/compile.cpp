#include "driver/compile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "backend/comm/collective_engine.h"
#include "backend/cpu/cpu_features.h"
#include "core/buffer_pool.h"
#include "core/data/resize_source.h"
#include "core/data/shard_source.h"
#include "core/file_fingerprint.h"
#include "core/graph_hash.h"
#include "core/import/loader/load_model.h"
#include "core/import/recorded_inputs.h"
#include "core/safetensors.h"
#include "core/verifier.h"
#include "driver/messages.h"
#include "driver/step_cache.h"
#include "driver/training_options.h"
#include "passes/freeze.h"

namespace kiln::driver {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

/// The model with these data input types; none: those the file records.
Result<Model> importWith(const CompileOptions& a, std::vector<TensorType> types, CompileObserver& observer) {
  ImportOptions opts;
  opts.training = true;
  opts.input_types = std::move(types);
  // Cancel reaches into the import: asked between its phases and every few
  // hundred nodes.
  opts.keep_going = [&observer] { return observer.keepGoing(); };
  auto model = loadModel(a.model.path, opts);
  if (!model) return model.error().kind == ErrorKind::kCancelled ? compileCancelled() : model.error();
  if (Status s = verify(model->graph); !s)
    return Error{a.model.path + ": imported graph is invalid (a Kiln bug): " + s.error().message};
  return model;
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
    if (n->is(Op::embedding) && u.index == 1) return n->input(0)->shape()[0];
    if (n->is(Op::cross_entropy) && u.index == 1)
      return n->input(0)->shape().size() == 1 ? n->input(0)->shape()[0] : n->input(0)->shape()[1];
    if (n->is(Op::reshape) || n->is(Op::cast))
      if (int64_t h = syntheticHigh(n->output()); h != 2) return h;
  }
  return 2;
}

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

Result<BoundStep> setUp(const CompileOptions& a, TrainingGraphKind kind, CompileObserver& observer, bool lookup,
                        std::string problem) {
  if (Status s = validateOptions(a); !s) return s.error();
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
  const int ranks = a.collectives ? a.collectives->size() : a.compile_only ? a.nnodes * a.nproc : 1;
  const int rank = a.collectives ? a.collectives->rank() : 0;
  if ((a.nproc > 1 || a.nnodes > 1) && !a.collectives && !a.compile_only)
    return Error{"--nproc starts ranks for kiln train and kiln grad only"};
  if (!a.model.input_file.empty()) {
    auto f = readSafetensors(a.model.input_file);
    if (!f) return f.error();
    auto part = shardBatch(f->tensors, rank, ranks, a.model.input_file);
    if (!part) return part.error();
    first = a.image_size > 0 ? resizeImages(*part, a.image_size) : std::move(*part);
    types = typesOf(first);
    if (types.empty())
      return Error{a.model.input_file + ": holds no tensor named input0 (inputs are keyed input0, input1, ...)"};
    setup.batches = fixedBatchSource(first, a.model.input_file);
    setup.batch_where = a.model.input_file;
    setup.fixed_batch = true;
    types_from_batch = true;
  } else if (!a.data.empty() && std::filesystem::is_directory(a.data)) {
    auto src = safetensorsDirSource(a.data);
    if (!src) return src.error();
    *src = shardedSource(std::move(*src), rank, ranks);
    if (a.image_size > 0) *src = resizedSource(std::move(*src), a.image_size);
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
  if (a.image_size > 0 && !types_from_batch)
    return Error{"--image-size / --resize-schedule resize the images of --data or --input-file batches; synthetic "
                 "and token batches take their shapes from --input-shape or the model"};
  if (a.image_size > 0 &&
      std::ranges::none_of(types, [](const TensorType& t) { return t.rank() == 4 && isFloating(t.dtype); }))
    return Error{"--image-size / --resize-schedule: the batch has no 4-D floating image input [N, C, H, W] to resize"};

  // 2. The compile cache: a step compiled before with the same inputs.
  std::optional<CachedStep> cached;
  std::string material;
  std::optional<CompileCache> cache;
  ModelIdentity identity;  // of the model file compiled now
  if (cacheEnabled(a)) {
    auto m = stepCacheKeyMaterial(a, kind, first);
    auto fingerprint = modelFingerprint(a.model.path);
    if (m && fingerprint) {  // else an unreadable model: the import below says why
      cache.emplace(a.cache_dir.empty() ? CompileCache::defaultDir() : a.cache_dir);
      material = std::move(*m);
      identity.contents = std::move(fingerprint->contents);
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
  std::optional<Model> declared_model;  // imported for its declared types: reused if they stay
  if (!types_from_batch) {
    if (cached) {
      types = modelInputTypes(cached->step.graph);
    } else {
      // --input-shape, else what the file records (read without importing
      // it), else what an import finds: the model is imported once, with the
      // final shapes, unless only an import can tell the recorded ones.
      if (!a.model.input_shapes.empty()) {
        auto parsed = parseInputShapes(a.model.input_shapes);
        if (!parsed) return parsed.error();
        types = std::move(*parsed);
      } else if (auto recorded = recordedInputTypes(a.model.path)) {
        types = std::move(*recorded);
      } else {
        auto declared = importWith(a, {}, observer);
        if (!declared) return declared.error();
        ++setup.imports;
        types = modelInputTypes(declared->graph);
        declared_model = std::move(*declared);
      }
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

  for (const TensorType& t : types)  // --batch and --seq-len can make a parsed shape too large
    if (boundedNumel(t.shape) < 0)
      return Error{"a batch input of " + t.str() + " has more than 2^40 elements (--input-shape, --batch, --seq-len)"};

  // 4. The model: its weights (not needed to only compile from the cache,
  // unless the entry was compiled from another file: then the import checks
  // the hit).
  if (!observer.onStage(0, "importing " + a.model.path)) return compileCancelled();
  const bool other_file = cached && cached->model.contents != identity.contents;
  Model model;
  bool imported = true;
  if (declared_model && modelInputTypes(declared_model->graph) == types) {
    model = std::move(*declared_model);  // no --batch, --seq-len or ranks changed the shapes: no second import
  } else if (cached && !other_file && a.weights && !a.compile_only) {
    model.weights = a.weights->weights;  // the compiled graph is cached and the tensors are at hand
    model.aliases = a.weights->aliases;
    imported = false;
  } else if (!(cached && !other_file && a.compile_only)) {
    auto m = importWith(a, types, observer);
    if (!m) return m.error();
    ++setup.imports;
    model = std::move(*m);
  } else {
    imported = false;
  }
  if (cache && imported) identity.graph = hashHex(structuralHash(model.graph));
  if (other_file && identity.graph != cached->model.graph) {
    // The import read values of the file's tensors into the graph (a 0-d
    // tensor attribute as a scalar): the entry is another model's.
    if (setup.cache.problem.empty())
      setup.cache.problem = "cache entry " + setup.cache.entry + " was compiled from another file of " +
                            a.model.path + "'s structure whose import makes another graph; rebuilt";
    cached.reset();
  }
  // Selective backprop: the model just imported scores the whole batch; the
  // step trains the same model imported at the selected rows.
  std::shared_ptr<const Graph> scoring;
  int64_t selected = 0;
  if (a.selective_backprop > 0 && kind == TrainingGraphKind::Step) {
    if (types.empty() || types[0].shape.empty()) return Error{"--selective-backprop needs a batched input0"};
    const int64_t rows = types[0].shape[0];
    selected = selectedRows(a.selective_backprop, rows);
    if (selected >= rows)
      return Error{"--selective-backprop " + std::to_string(a.selective_backprop) + " keeps all " +
                   std::to_string(rows) + " rows of the batch; give a smaller fraction or a larger batch"};
    if (!cached) {
      std::vector<TensorType> picked = types;
      for (TensorType& t : picked)
        if (!t.shape.empty()) t.shape[0] = selected;
      auto trained = importWith(a, picked, observer);
      if (!trained)
        return trained.error().prefixed("--selective-backprop: the model at " + std::to_string(selected) + " rows: ");
      ++setup.imports;
      scoring = std::make_shared<const Graph>(std::move(model.graph));
      model = std::move(*trained);
    }
  }
  model.source = a.model.path;
  if (model.shapes_only && !a.compile_only)
    return Error{a.model.path +
                 ": a shapes-only dump (no weights) can only be compiled (kiln compile, kiln memory, kiln-studio); "
                 "to train or run it, export it with its weights (without --shapes-only)"};
  setup.import_ms = msSince(t0);

  // 5. The training configuration.
  auto training = trainingOptions(a, ranks, rank);
  if (!training) return training.error();
  TrainingConfig cfg;
  TrainingOptions& to = cfg.passes.training;
  to = std::move(*training);
  if (const auto& w = to.cross_entropy.class_weights; !w.empty()) {
    Tensor t(DType::F32, {static_cast<int64_t>(w.size())});
    for (size_t k = 0; k < w.size(); ++k) t.set(static_cast<int64_t>(k), w[k]);
    model.weights[kClassWeightsInput] = std::move(t);
  }
  if (auto it = first.find("target"); it != first.end()) to.target = it->second.type();
  if (!token_file.empty()) to.target = TensorType{DType::I64, types[0].shape};
  if (selected > 0) {  // the loss pass runs on the forward at the selected rows
    if (to.target && !to.target->shape.empty()) to.target->shape[0] = selected;
    to.selective = {a.selective_backprop, scoring};
  }
  if (to.amp.mode == AmpMode::Bf16 && a.device != "cuda" && !cpu::cpuHasNativeBf16()) {
    static bool said = false;  // once per process (a stale cache entry sets up twice)
    if (!said)
      std::cerr << "kiln: note: this CPU has no bf16 instructions (AVX512_BF16 or AMX): --amp bf16 rounds like "
                   "bf16 but is emulated, not faster than f32\n";
    said = true;
  }
  to.amp.loss_scaling = kind == TrainingGraphKind::Step;  // kiln grad has no optimizer to unscale
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
  cfg.muon_lr = a.muon_lr;
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
    cfg.collectives = a.collectives;  // nullptr when only compiling
    cfg.local_rank = a.local_rank;
    cfg.local_world_size = a.local_world_size;
    // joinRanks settled these from the flags or the environment.
    auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
    if (a.checkpoint_timeout > 0) cfg.checkpoint_timeout = ms(a.checkpoint_timeout);
    if (a.comm_timeout > 0) cfg.collective_timeout = ms(a.comm_timeout);
    if (a.rendezvous_timeout > 0) cfg.rendezvous_timeout = ms(a.rendezvous_timeout);
    auto isDp = [](const PassInfo* p) { return std::string_view(p->name) == "data_parallel"; };
    if (!pipeline->empty() && std::ranges::none_of(*pipeline, isDp))
      return Error{
          "--nproc needs the data_parallel pass in --passes (after autodiff, e.g. "
          "loss,autodiff,data_parallel,optimizer)"};
  }
  cfg.pipeline = std::move(*pipeline);
  cfg.pass_options = passManagerOptions(a.pass_flags, &std::cout);
  cfg.pass_options.keep_ir = a.keep_pass_ir;
  bool cancelled = false;
  cfg.pass_options.progress = [&](size_t index, size_t count, const std::string& pass) {
    const int percent = 10 + static_cast<int>(80 * index / std::max<size_t>(count, 1));
    cancelled =
        !observer.onStage(percent, "pass " + std::to_string(index + 1) + " of " + std::to_string(count) + ": " + pass);
    return !cancelled;
  };
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
      return setUp(a, kind, observer, false, setup.cache.problem.empty() ? why : setup.cache.problem);
    }
  }
  if (cancelled) return compileCancelled();
  if (!session) return session.error().prefixed(a.model.path + ": ");
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
      if (Status st = cache->store(setup.cache.key, encodeStep(*setup.session, a.model.path, material, identity)); !st)
        std::cerr << "kiln: warning: could not write the compile cache (" << st.error().message << ")\n";
    }
  }

  // A step that cannot fit in this machine's memory: one line now, not a
  // bad_alloc at the first batch.
  if (!a.compile_only && a.device == "cpu") {
    const uint64_t need = setup.session->memoryPlan().peak_bytes, have = physicalMemoryBytes();
    if (have && need > have)
      return Error{"the step needs " + humanCount(double(need), "B") +
                   " at its peak (its memory plan: weights, optimizer state, the batch and activations), more "
                   "than this machine's " +
                   humanCount(double(have), "B") +
                   "; use a smaller batch (--batch, --input-shape, --seq-len) or --memory-budget to recompute "
                   "activations (kiln memory shows the plan)"};
  }

  const bool synthetic = !setup.batches;
  if (synthetic) {
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
  // Only compiling, synthetic batches are made to the step's own types:
  // nothing to check, and none is made (kiln memory plans steps larger than
  // this machine).
  if (synthetic && a.compile_only) return setup;
  auto b0 = setup.batches->batch(0);
  if (!b0) return b0.error();
  if (Status s = setup.session->checkBatch(*b0, setup.batch_where); !s) return s.error();
  return setup;
}

}  // namespace

Result<BoundStep> compileStep(const CompileOptions& a, TrainingGraphKind kind, CompileObserver* observer) {
  CompileObserver quiet;
  return setUp(a, kind, observer ? *observer : quiet, true, {});
}

}  // namespace kiln::driver
