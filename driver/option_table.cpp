// The option table (option_table.h). A new option is one row here plus its
// field in CompileOptions; its flag, its place in the cache key and in the
// report follow from the row.
#include "driver/option_table.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <stdexcept>

#include "core/file_fingerprint.h"

namespace kiln::driver {
namespace {

#define FIELD(member) [](CompileOptions& o) -> OptionField { return &o.member; }

// Which commands take an option.
constexpr uint32_t kSteps = kTrain | kComm | kGrad | kCompile | kBench | kMemory | kExport | kStudio;  // every step
constexpr uint32_t kOptimizing = kTrain | kComm | kCompile | kBench | kMemory | kExport | kStudio;  // with an optimizer
constexpr uint32_t kPassOptions = kSteps | kOpt;           // read by the passes (kiln opt too)
constexpr uint32_t kLaunching = kTrain | kGrad | kComm;     // start ranks (driver/ranks.h)
constexpr uint32_t kOptimizerPasses = kOptimizing | kOpt;  // read by the optimizer pass

using K = KeyRule;

const std::vector<OptionSpec> kTable = {
    // The model and its inputs.
    {"model", "TorchScript archive (.pt, traced in train mode) or FX dump (.fx.json)", kSteps, K::ModelStructure,
     FIELD(model.path)},
    {"--input-file", "batch (safetensors): input0, input1, ... and target; used for every step", kSteps,
     K::Implied /* its tensors' types */, FIELD(model.input_file)},
    {"--input-shape", "data input type for synthetic batches, e.g. 8x32 or i64[2,16]", kSteps, K::Compiled,
     FIELD(model.input_shapes)},
    {"--train", "--graph forward: import in training mode", kExport, K::Compiled, FIELD(model.train)},
    {"--data", "a directory of safetensors batches (cycled), or a flat binary token file (language models)",
     kOptimizing, K::Implied /* whether it is a token file; its batches' types */, FIELD(data)},
    {"--token-type", "token file id type: u16 (default), i32 or i64", kOptimizing, K::Runtime, FIELD(token_type)},
    {"--seq-len", "token window length (default: the model's input length)", kOptimizing, K::Compiled, FIELD(seq_len)},
    {"--batch", "batch size of synthetic or token batches (default: the model's)", kOptimizing, K::Compiled,
     FIELD(batch)},
    {"--image-size",
     "resize every 4-D image input [N, C, H, W] of --data / --input-file batches to SIZE x SIZE when it is read "
     "(bilinear, as F.interpolate(align_corners=False); the batch reader's thread)",
     kOptimizing, K::Implied /* the batch's types */, FIELD(image_size)},

    // The loss.
    {"--loss",
     "cross_entropy (class-index target), mse, l1, smooth_l1, huber, bce (with logits; targets in [0, 1]), kl_div "
     "(target: a distribution over the last dim; distillation), or model (output 0 is the loss)",
     kPassOptions, K::Compiled, FIELD(loss)},
    {"--label-smoothing",
     "cross_entropy: mix the target with a uniform distribution over the classes (F.cross_entropy's "
     "label_smoothing, default 0)",
     kPassOptions, K::Compiled, FIELD(label_smoothing)},
    {"--ignore-index",
     "cross_entropy: targets with this class count neither in the loss nor in its mean (default -100)",
     kPassOptions, K::Compiled, FIELD(ignore_index)},
    {"--class-weights",
     "cross_entropy: one weight per class, from a safetensors file holding one 1-D tensor or a text file of "
     "numbers (F.cross_entropy's weight)",
     kSteps, K::FileContents, FIELD(class_weights)},

    // The optimizer and its schedule.
    {"--optimizer",
     "sgd, adam, adamw (default), or muon (Muon for the hidden weight matrices: 2-D, not read by an embedding; "
     "AdamW with --lr, --beta1, --beta2, --eps, --weight-decay for the other parameters)",
     kOptimizerPasses, K::Compiled, FIELD(optimizer)},
    {"--lr", "learning rate (default 1e-3)", kOptimizing, K::Runtime /* a step input */, FIELD(lr)},
    {"--momentum", "SGD momentum (default 0)", kOptimizerPasses, K::Compiled, FIELD(momentum)},
    {"--dampening", "SGD dampening (default 0)", kOptimizerPasses, K::Compiled, FIELD(dampening)},
    {"--nesterov", "SGD with Nesterov momentum", kOptimizerPasses, K::Compiled, FIELD(nesterov)},
    {"--weight-decay", "weight decay (default: 0 for sgd/adam, 0.01 for adamw)", kOptimizerPasses, K::Compiled,
     FIELD(weight_decay)},
    {"--beta1", "Adam beta1 (default 0.9)", kOptimizerPasses, K::Compiled, FIELD(beta1)},
    {"--beta2", "Adam beta2 (default 0.999)", kOptimizerPasses, K::Compiled, FIELD(beta2)},
    {"--eps", "Adam epsilon (default 1e-8)", kOptimizerPasses, K::Compiled, FIELD(eps)},
    {"--clip-grad-norm", "clip the global gradient norm to this (0: off)", kOptimizerPasses, K::Compiled,
     FIELD(clip_grad_norm)},
    {"--muon-lr", "Muon's learning rate (default 0.02), under the same schedule as --lr", kOptimizing,
     K::Runtime /* a step input */, FIELD(muon_lr)},
    {"--muon-momentum", "Muon's Nesterov momentum (default 0.95)", kOptimizerPasses, K::Compiled,
     FIELD(muon_momentum)},
    {"--muon-weight-decay", "Muon's decoupled weight decay (default 0)", kOptimizerPasses, K::Compiled,
     FIELD(muon_weight_decay)},
    {"--lr-schedule", "constant (default) or warmup_cosine", kOptimizing, K::Runtime, FIELD(lr_schedule)},
    {"--warmup-steps", "linear warm-up steps (from lr/K to lr), then the schedule", kOptimizing, K::Runtime,
     FIELD(warmup_steps)},
    {"--min-lr", "learning rate at the end of the cosine decay", kOptimizing, K::Runtime, FIELD(min_lr)},
    {"--steps", "train until this many steps are done (default 10)", kOptimizing, K::Runtime, FIELD(steps)},
    {"--freeze",
     "train no parameter matching this glob on state_dict names; without * ? [ a name or module prefix (layer1 "
     "freezes layer1.0.conv1.weight) (repeatable)",
     kPassOptions, K::Compiled, FIELD(freeze)},

    // The training recipe (driver/recipe.h).
    {"--eval-data",
     "held-out batches to evaluate on (a directory of safetensors batches read once through, or a token file cut "
     "into whole batches): the forward in eval mode, compiled once",
     kTrain, K::Runtime, FIELD(eval_data)},
    {"--eval-every", "evaluate every N steps (default 0: after the last step only)", kTrain, K::Runtime,
     FIELD(eval_every)},
    {"--metric",
     "the evaluation's metric for --target and the log: accuracy (default for cross_entropy), loss or perplexity",
     kTrain, K::Runtime, FIELD(metric), "accuracy,loss,perplexity"},
    {"--target",
     "stop when the evaluation's --metric reaches this (accuracy at or above it; loss or perplexity at or below "
     "it) and report the steps and training time to it",
     kTrain, K::Runtime, FIELD(target)},
    {"--freeze-schedule",
     "progressive freezing: STEP:PATTERN,... freezes the parameters PATTERN selects (as --freeze) from STEP on; "
     "each new frozen set is a step compiled through the cache, its backward and optimizer state gone",
     kTrain, K::Runtime /* each scheduled step keys on its own frozen set */, FIELD(freeze_schedule)},
    {"--seq-warmup",
     "sequence-length warm-up over a token file (--data): windows of START tokens first, growing linearly (in "
     "multiples of 8) to the full --seq-len by step STEPS; one compiled step per length (START:STEPS)",
     kTrain, K::Runtime /* each length is a step of its own */, FIELD(seq_warmup)},
    {"--resize-schedule",
     "progressive resizing: STEP:SIZE,... trains on images resized to SIZE x SIZE from STEP on (as --image-size; "
     "evaluation at the data's own size); one compiled step per size",
     kTrain, K::Runtime /* each size is a step of its own */, FIELD(resize_schedule)},
    {"--selective-backprop",
     "selective backprop: the forward scores the whole batch, the backward learns from the FRACTION of it with the "
     "highest loss only (a static top-k in the step; the model is imported at both sizes; 0: off)",
     kOptimizing, K::Compiled, FIELD(selective_backprop)},
    {"--ema",
     "keep an exponential moving average of the weights and BatchNorm statistics with this decay (e.g. 0.999), "
     "updated by the step graph as torch.optim.swa_utils.AveragedModel(use_buffers=True)'s EMA; evaluations use "
     "it (0: off, default)",
     kOptimizerPasses, K::Compiled, FIELD(ema)},
    {"--save-ema", "write the averaged weights and statistics (--ema) here, a state_dict (safetensors)", kTrain,
     K::Runtime, FIELD(save_ema)},

    // Precision and memory.
    {"--amp",
     "mixed precision: bf16 or fp16 (matmul/linear/conv in low precision, f32 master weights; fp16 with dynamic "
     "loss scaling when training), or none (default)",
     kPassOptions, K::Compiled, FIELD(amp)},
    {"--memory-budget",
     "fit the step's peak memory (weights, optimizer state, batch and intermediates) in this many bytes, e.g. 2GiB "
     "or 512MiB, by recomputing activations in the backward (remat)",
     kPassOptions, K::Compiled, FIELD(memory_budget)},

    // Execution.
    {"--seed", "seed for synthetic batches and random ops (dropout)", kSteps, K::Runtime, FIELD(seed)},
    {"--threads", "CPU threads (0: all cores)", kSteps, K::Runtime, FIELD(threads)},
    {"--device", "cpu (default) or cuda (the CUDA plugin; state stays on the GPU)", kSteps, K::Compiled,
     FIELD(device), "cpu,cuda"},
    {"--dialects",
     "kernel dialects to use, best first, e.g. onednn,blas,cpu (default: all, by priority; kiln ops lists each "
     "op's kernels)",
     kSteps, K::Compiled, FIELD(dialects)},
    {"--autotune",
     "time every applicable kernel on the real shapes and keep the fastest (kept in the report and the compile "
     "cache)",
     kSteps, K::Compiled, FIELD(autotune)},
    {"--serial-nodes",
     "run one node at a time, threads only inside ops (default: small independent nodes run side by side)", kSteps,
     K::Compiled /* the stages change the memory plan */, FIELD(serial_nodes)},
    {"--prefetch", "read this many batches ahead on a thread of their own (default 2; 0: in the step's thread)",
     kOptimizing, K::Runtime, FIELD(prefetch)},

    // The passes.
    {"--passes", "run these passes (a,b,c) instead of the default pipeline (kiln passes)", kPassOptions, K::Compiled,
     FIELD(pass_flags.passes)},
    {"--print-ir-after", "print the text IR after this pass (repeatable)", kPassOptions,
     K::Runtime /* turns the cache off */, FIELD(pass_flags.print_ir_after)},
    {"--print-ir-after-change", "print the text IR after every pass that changed it", kPassOptions, K::Runtime,
     FIELD(pass_flags.print_ir_after_change)},
    {"--verify-each", "verify the graph after every pass (else once at the end)", kPassOptions, K::Runtime,
     FIELD(pass_flags.verify_each)},
    {"--dump-dir", "write the text IR before and after every pass into this directory", kPassOptions, K::Runtime,
     FIELD(pass_flags.dump_dir)},
    {"--report-pass-ir",
     "also keep the text IR after every pass that changed the graph in the report (kiln-studio's passes view diffs "
     "them); compiles even when the cache has the step",
     kTrain | kCompile, K::Runtime /* turns the cache off */, FIELD(keep_pass_ir)},

    // Data parallel.
    {"--nproc",
     "data parallel: start this many ranks (processes talking through Gloo on 127.0.0.1); each trains on its 1/N "
     "slice of every batch, gradients are averaged as in PyTorch DDP. Also runs as one rank under an external "
     "launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)",
     kPassOptions, K::Implied /* the rank count */, FIELD(nproc)},
    {"--nnodes",
     "data parallel over machines: run the same command on each of M machines with its --node-rank; each starts "
     "--nproc ranks (torchrun's static form; needs --master-addr and --master-port)",
     kPassOptions, K::Implied /* the rank count */, FIELD(nnodes)},
    {"--node-rank", "data parallel over machines: this machine's index, 0..M-1 (node 0 serves the rendezvous store)",
     kLaunching, K::Runtime, FIELD(node_rank)},
    {"--master-addr", "data parallel: node 0's address, which every machine can reach (default 127.0.0.1)",
     kLaunching, K::Runtime, FIELD(master_addr)},
    {"--master-port", "data parallel: the rendezvous store's port on node 0 (default: a free port, one machine only)",
     kLaunching, K::Runtime, FIELD(master_port)},
    {"--bucket-size", "data parallel: gradient bytes per allreduce bucket (default 25MiB, as DDP)", kPassOptions,
     K::DataParallel, FIELD(bucket_size)},
    {"--sparse-grads",
     "data parallel: allreduce these parameters' gradients block-sparse (only non-zero rows travel); patterns as "
     "--freeze; embedding gradients are sparse anyway (repeatable)",
     kPassOptions, K::DataParallel, FIELD(sparse_grads)},
    {"--dense-embeddings", "data parallel: allreduce embedding gradients densely too", kPassOptions, K::DataParallel,
     FIELD(dense_embeddings)},
    {"--zero",
     "data parallel: ZeRO stage; 1 shards the optimizer state (each rank keeps and updates the state of its share "
     "of the parameters; gradients are reduce-scattered, parameters all-gathered), with the same results as plain "
     "data parallel",
     kOptimizerPasses, K::DataParallel, FIELD(zero)},
    {"--comm-timeout",
     "data parallel: seconds a collective waits for the other ranks before it fails (default 1800, PyTorch's; a "
     "rank that dies is noticed at once)",
     kSteps, K::Runtime, FIELD(comm_timeout)},
    {"--rendezvous-timeout", "data parallel: seconds the ranks wait for each other to start (default 600)", kSteps,
     K::Runtime, FIELD(rendezvous_timeout)},
    {"--checkpoint-timeout",
     "data parallel: seconds the other ranks wait while rank 0 writes or reads a checkpoint (default 3600)", kSteps,
     K::Runtime, FIELD(checkpoint_timeout)},

    // The compile cache and the output.
    {"--no-cache", "neither read nor write the compile cache (kiln cache)", kSteps, K::Runtime, FIELD(no_cache)},
    {"--cache-dir",
     "compile cache directory (default: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)", kSteps,
     K::Runtime, FIELD(cache_dir)},
    {"--verbose,-v", "print the passes and full error messages", kSteps, K::Runtime, FIELD(verbose)},
};

#undef FIELD

/// The field `spec` names in `o`, to read only (OptionSpec::field takes a
/// mutable struct so that one accessor serves parsing and reading).
OptionField readField(const OptionSpec& spec, const CompileOptions& o) {
  return spec.field(const_cast<CompileOptions&>(o));
}

/// The value a field holds, as JSON (an unset optional as null).
nlohmann::ordered_json valueJson(const OptionField& f) {
  return std::visit(
      [](auto* p) -> nlohmann::ordered_json {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::optional<double>>)
          return *p ? nlohmann::ordered_json(**p) : nlohmann::ordered_json(nullptr);
        else
          return *p;
      },
      f);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(text.substr(start, comma - start));
  out.push_back(text.substr(start));
  return out;
}

/// A double as text that reads back as the same double.
std::string exactText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::string OptionSpec::jsonName() const {
  std::string name;
  for (const std::string& n : split(flags))
    if (n.rfind("--", 0) == 0 || n.find('-') != 0) {  // the long name, or the positional one
      name = n.rfind("--", 0) == 0 ? n.substr(2) : n;
      break;
    }
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

const std::vector<OptionSpec>& optionTable() { return kTable; }

void addOptions(CLI::App* sub, CompileOptions& o, Command command) {
  for (const OptionSpec& spec : kTable) {
    if (!(spec.commands & command)) continue;
    CLI::Option* opt = std::visit(
        [&](auto* p) -> CLI::Option* {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            return sub->add_flag(spec.flags, *p, spec.help);
          else
            return sub->add_option(spec.flags, *p, spec.help);
        },
        spec.field(o));
    if (spec.choices) opt->check(CLI::IsMember(split(spec.choices)));
    if (std::string(spec.flags) == "model" && command != kStudio) opt->required();  // kiln-studio opens empty
  }
}

nlohmann::ordered_json optionsJson(const CompileOptions& o) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const OptionSpec& spec : kTable) j[spec.jsonName()] = valueJson(readField(spec, o));
  return j;
}

Status optionsFromJson(const nlohmann::json& j, CompileOptions& o) {
  if (!j.is_object()) return Error{"options: expected an object"};
  for (const OptionSpec& spec : kTable) {
    auto it = j.find(spec.jsonName());
    if (it == j.end()) continue;
    try {
      std::visit(
          [&](auto* p) {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, std::optional<double>>) {
              if (it->is_null())
                p->reset();
              else
                *p = it->template get<double>();
            } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool> ||
                                 std::is_same_v<T, std::vector<std::string>>) {
              *p = it->template get<T>();
            } else {  // numbers: refuse a string or a bool where JSON would convert
              if (!it->is_number()) throw std::invalid_argument("not a number");
              *p = it->template get<T>();
            }
          },
          spec.field(o));
    } catch (const std::exception&) {
      return Error{"options." + spec.jsonName() + ": " + it->dump() + " is not a valid value"};
    }
  }
  return {};
}

std::vector<std::string> toArguments(const CompileOptions& o, Command command) {
  static const CompileOptions kDefaults;
  std::vector<std::string> words;
  for (const OptionSpec& spec : kTable) {
    if (!(spec.commands & command) || spec.jsonName() == "model") continue;
    const OptionField field = readField(spec, o);
    if (valueJson(field) == valueJson(readField(spec, kDefaults))) continue;
    std::string name = spec.flags;
    name = name.substr(0, name.find(','));
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>) {
            words.push_back(name);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            for (const std::string& v : *p) words.insert(words.end(), {name, v});
          } else if constexpr (std::is_same_v<T, std::string>) {
            words.insert(words.end(), {name, *p});
          } else if constexpr (std::is_same_v<T, std::optional<double>>) {
            words.insert(words.end(), {name, exactText(p->value_or(0))});  // differs from unset: set
          } else if constexpr (std::is_same_v<T, double>) {
            words.insert(words.end(), {name, exactText(*p)});
          } else {
            words.insert(words.end(), {name, std::to_string(*p)});
          }
        },
        field);
  }
  return words;
}

Result<nlohmann::ordered_json> compiledOptionsJson(const CompileOptions& o, int ranks) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const OptionSpec& spec : kTable) {
    const OptionField field = readField(spec, o);
    switch (spec.key) {
      case KeyRule::Runtime:
      case KeyRule::Implied:  // stepCacheKeyMaterial adds what they imply
        break;
      case KeyRule::DataParallel:
        if (ranks > 1) j[spec.jsonName()] = valueJson(field);
        break;
      case KeyRule::Compiled:
        j[spec.jsonName()] = valueJson(field);
        break;
      case KeyRule::FileContents:
      case KeyRule::ModelStructure: {
        const std::string& path = *std::get<std::string*>(field);
        if (path.empty()) {
          j[spec.jsonName()] = nullptr;
          break;
        }
        if (spec.key == KeyRule::ModelStructure) {
          auto fingerprint = modelFingerprint(path);
          if (!fingerprint) return fingerprint.error();
          j[spec.jsonName()] = fingerprint->structure;
        } else {
          auto fingerprint = fileFingerprint(path);
          if (!fingerprint) return fingerprint.error();
          j[spec.jsonName()] = *fingerprint;
        }
        break;
      }
    }
  }
  return j;
}

}  // namespace kiln::driver
