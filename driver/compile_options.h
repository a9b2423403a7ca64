// The options of compiling and training a model, one struct for every
// front end. Which of them a command takes, its flag, its help text, and
// whether it changes the compiled step (and so the compile cache key) are
// declared once, in driver/option_table.cpp.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/model_args.h"
#include "driver/pass_flags.h"

namespace kiln {
struct Model;
class CollectiveEngine;
class TraceRecorder;
}  // namespace kiln

namespace kiln::driver {

struct CompileOptions {
  ModelArgs model;   ///< model.input_file doubles as the fixed batch file
  std::string data;  ///< directory of safetensors batches, or a token file
  std::string token_type = "u16";
  int64_t seq_len = 0;  ///< token windows; 0: the model's input length
  int64_t batch = 0;    ///< synthetic/token batch size; 0: the model's
  int64_t image_size = 0;  ///< --image-size: resize 4-D image inputs to this square size on loading; 0: as read
  std::string loss = "cross_entropy";
  double label_smoothing = 0;     ///< --label-smoothing (cross_entropy)
  int64_t ignore_index = -100;    ///< --ignore-index (cross_entropy)
  std::string class_weights;      ///< --class-weights FILE (cross_entropy): one weight per class
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  std::optional<double> weight_decay;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double muon_lr = 0.02, muon_momentum = 0.95, muon_weight_decay = 0;  ///< --optimizer muon (passes/muon.h)
  double clip_grad_norm = 0;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  double min_lr = 0;
  std::vector<std::string> freeze;  ///< --freeze patterns (passes/freeze.h)
  // The training recipe (driver/recipe.h): kiln train only.
  std::string eval_data;          ///< --eval-data: held-out batches (a directory or a token file)
  int64_t eval_every = 0;         ///< --eval-every: evaluate every N steps (0: after the last only)
  std::string metric;             ///< --metric: accuracy, loss or perplexity ("": by the loss; driver/recipe.h)
  std::optional<double> target;   ///< --target: stop when the metric reaches it
  std::string freeze_schedule;    ///< --freeze-schedule: STEP:PATTERN,... (freezing more as training goes)
  double ema = 0;                 ///< --ema: decay of the weights' moving average (0: none; passes/ema.h)
  std::string save_ema;           ///< --save-ema: write the averaged weights (safetensors) here
  std::string seq_warmup;         ///< --seq-warmup START:STEPS: token windows from START up to --seq-len
  std::string resize_schedule;    ///< --resize-schedule STEP:SIZE,...: --image-size from each STEP on
  double selective_backprop = 0;  ///< --selective-backprop: the fraction of each batch the backward sees (0: all)
  std::string amp = "none";         ///< --amp: none, bf16 or fp16 (passes/amp.h)
  std::string memory_budget;        ///< --memory-budget: peak bytes for remat ("2GiB"); empty: none
  int64_t steps = 10;
  uint64_t seed = 0;
  int threads = 0;
  std::string device = "cpu";  ///< --device: cpu or cuda
  std::string dialects;        ///< --dialects: kernel dialects, best first; empty: all, by priority
  bool autotune = false;       ///< --autotune: time the applicable kernels, keep the fastest
  bool serial_nodes = false;   ///< --serial-nodes: one node at a time, threads only inside ops
  bool verbose = false;
  PassFlags pass_flags;   ///< --passes (instead of the default pipeline), IR printing, dumps
  bool no_cache = false;  ///< --no-cache: neither read nor write the compile cache
  /// --report-pass-ir: keep every pass's IR for the report (compiles even
  /// when the cache has the step: a cached step has no pass IR).
  bool keep_pass_ir = false;
  std::string cache_dir;  ///< --cache-dir (default: CompileCache::defaultDir())
  /// kiln compile / memory: build and bind the step only; on a cache hit the
  /// model is not even imported.
  bool compile_only = false;
  int prefetch = 2;  ///< --prefetch: batches read ahead on their own thread (0: read in the step's thread)
  /// Where the prefetch thread's data-loading slices go (kiln train --trace).
  TraceRecorder* trace = nullptr;
  /// A compile-cache hit takes the model's tensors from here instead of
  /// importing the file again (a recipe's schedule point: the training
  /// state is carried over anyway). Not an option.
  std::shared_ptr<const Model> weights;
  // Data parallel (driver/ranks.h, passes/data_parallel.h).
  int nproc = 1;                          ///< --nproc: start this many ranks (1: one process)
  int nnodes = 1;                         ///< --nnodes: machines, each starting --nproc ranks
  int node_rank = 0;                      ///< --node-rank: this machine's index (0: it serves the store)
  std::string master_addr;                ///< --master-addr: node 0's address ("": 127.0.0.1)
  int master_port = 0;                    ///< --master-port: its store's port (0: a free one; one node only)
  std::string bucket_size = "25MiB";      ///< --bucket-size: gradient bytes per allreduce
  std::vector<std::string> sparse_grads;  ///< --sparse-grads: block-sparse allreduce for these gradients
  bool dense_embeddings = false;          ///< --dense-embeddings: no automatic sparse embedding gradients
  double comm_timeout = 0;                ///< --comm-timeout seconds (0: $KILN_COMM_TIMEOUT, else 1800)
  double rendezvous_timeout = 0;          ///< --rendezvous-timeout seconds (0: $KILN_RENDEZVOUS_TIMEOUT, else 600)
  double checkpoint_timeout = 0;          ///< --checkpoint-timeout seconds (0: $KILN_CHECKPOINT_TIMEOUT, else 3600)
  int zero = 0;                           ///< --zero: ZeRO stage (1: optimizer state sharded over the ranks)
  /// This process's rank of a data-parallel run (joinRanks); nullptr: one process.
  std::shared_ptr<CollectiveEngine> collectives;
  int local_rank = 0;        ///< this rank among its machine's (CommOptions::local_rank)
  int local_world_size = 1;  ///< the ranks on its machine (CommOptions::local_world_size)
};

}  // namespace kiln::driver
