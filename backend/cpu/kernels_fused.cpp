// CPU kernels of fused_elementwise and fused_reduction (passes/fuse.cpp,
// core/ops/fused.cpp).
//
// The body is compiled once per distinct body text into a program: one
// instruction per body node, each a plain loop over a block of elements
// that the compiler vectorizes. A run walks the flat index range in blocks
// of kBlock elements, split across OpenMP threads; every intermediate lives
// in a per-thread scratch block that stays in L1, so each operand is read
// once and each output written once. Instructions use the one-op kernels'
// functors (unary_ops.h) in the same dtype, so results are bit for bit
// those of the unfused graph. Bool intermediates are held as 0/1 in the
// compute type.
//
// bf16 bodies (amp's activations, and their casts to and from f32) compute
// in f32 and round every bf16 body value to bf16 as it is produced, as the
// one-op kernels round their outputs (a cast to bf16 is that rounding, one
// to f32 the value itself): the same bits as the unfused graph, with one
// read of each bf16 operand and one write of each output instead of an f32
// copy in and out of every op.
//
// fused_reduction runs reduce_loops.h, the one-op reductions' loops, on its
// body's first output computed block by block as the loops ask for it: the
// same elements combine in the same order, so the sum is the unfused one bit
// for bit, and the reduced value never reaches memory.
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/reduce_loops.h"
#include "backend/cpu/row_math.h"
#include "backend/cpu/unary_grad_block.h"
#include "backend/cpu/unary_ops.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"
#include "core/text_ir.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kBlock = 512;

template <class T>
struct Program {
  /// One instruction: reads slots `in`, writes slot `out`, over n elements.
  struct Instr {
    std::vector<int> in;
    int out = 0;
    bool round_bf16 = false;  ///< a bf16 body value: rounded as the one-op kernel's output is
    std::function<void(const T* const* in, T* out, int64_t n)> run;
  };
  std::shared_ptr<const Graph> body;  ///< the node's region (kept alive: the cache is keyed by its address)
  int num_slots = 0;
  std::vector<Instr> instrs;
  std::vector<int> output_slots;
  std::vector<DType> output_dtypes;
};

template <class T, class Op>
std::function<void(const T* const*, T*, int64_t)> unary(const Node& n) {
  return [op = Op(n)](const T* const* in, T* out, int64_t cnt) { unaryRun(in[0], out, cnt, op); };
}

template <class T, class F>
KILN_SIMD_CLONES void binaryRun(const T* __restrict a, const T* __restrict b, T* __restrict out, int64_t cnt, F f) {
  for (int64_t i = 0; i < cnt; ++i) out[i] = f(a[i], b[i]);
}

template <class T, class F>
std::function<void(const T* const*, T*, int64_t)> binary(F f) {
  return [f](const T* const* in, T* out, int64_t cnt) { binaryRun(in[0], in[1], out, cnt, f); };
}

/// where(c, a, b) with both sides loaded unconditionally: a select the
/// compiler turns into a vector blend. `c ? a[i] : b[i]` loads only one side,
/// which it may not do speculatively, so that loop ran a branch per element
/// (relu's backward, where(x <= 0, 0, g), was 10x slower than relu).
template <class T>
KILN_SIMD_CLONES void whereRun(const T* __restrict c, const T* __restrict a, const T* __restrict b, T* __restrict out,
                               int64_t cnt) {
  for (int64_t i = 0; i < cnt; ++i) {
    const T x = a[i], y = b[i];
    out[i] = c[i] != T(0) ? x : y;
  }
}

/// The instruction for one body node; fails for ops outside fusibleOps().
template <class T>
std::function<void(const T* const*, T*, int64_t)> instruction(const Node& n) {
  const Op op = n.kind();
  if (op == Op::add) return binary<T>([](T a, T b) { return a + b; });
  if (op == Op::sub) return binary<T>([](T a, T b) { return a - b; });
  if (op == Op::mul) return binary<T>([](T a, T b) { return a * b; });
  if (op == Op::div) return binary<T>([](T a, T b) { return a / b; });
  if (op == Op::lt) return binary<T>([](T a, T b) { return T(a < b); });
  if (op == Op::le) return binary<T>([](T a, T b) { return T(a <= b); });
  if (op == Op::gt) return binary<T>([](T a, T b) { return T(a > b); });
  if (op == Op::ge) return binary<T>([](T a, T b) { return T(a >= b); });
  if (op == Op::eq) return binary<T>([](T a, T b) { return T(a == b); });
  if (op == Op::ne) return binary<T>([](T a, T b) { return T(a != b); });
  if (op == Op::where) return [](const T* const* in, T* out, int64_t cnt) { whereRun(in[0], in[1], in[2], out, cnt); };
  if (op == Op::cast)  // f32 <-> bf16 in a float body: the value, rounded after when the cast is to bf16
    return [](const T* const* in, T* __restrict out, int64_t cnt) { std::copy(in[0], in[0] + cnt, out); };
  if (op == Op::full) {  // a scalar constant, converted as fullKernel does (a bf16 one rounded here, once)
    T v = convert<T>(n.f("value"));
    if (n.output()->dtype() == DType::BF16) v = T(bf16ToFloat(floatToBf16(static_cast<float>(v))));
    return [v](const T* const*, T* __restrict out, int64_t cnt) { std::fill(out, out + cnt, v); };
  }
  if (op == Op::unary_backward) {
    auto block = unaryBackwardBlock<T>(n);
    if (!block) return nullptr;
    return [block](const T* const* in, T* out, int64_t cnt) { block(in[0], in[1], out, cnt); };
  }
  if (op == Op::neg) return unary<T, NegOp>(n);
  if (op == Op::relu) return unary<T, ReluOp>(n);
  if (op == Op::gelu) return geluTanh(n) ? unary<T, GeluOp<true>>(n) : unary<T, GeluOp<false>>(n);
  if (op == Op::tanh) return unary<T, TanhOp>(n);
  if (op == Op::sigmoid) return unary<T, SigmoidOp>(n);
  if (op == Op::silu) return unary<T, SiluOp>(n);
  if (op == Op::exp) return unary<T, ExpOp>(n);
  if (op == Op::log) return unary<T, LogOp>(n);
  if (op == Op::sqrt) return unary<T, SqrtOp>(n);
  if (op == Op::rsqrt) return unary<T, RsqrtOp>(n);
  if (op == Op::abs) return unary<T, AbsOp>(n);
  if (op == Op::erf) return unary<T, ErfOp>(n);
  if (op == Op::leaky_relu) return unary<T, LeakyReluOp>(n);
  if (op == Op::hardtanh || op == Op::clamp) return unary<T, ClampOp>(n);
  if (op == Op::hardswish) return unary<T, HardswishOp>(n);
  if (op == Op::hardsigmoid) return unary<T, HardsigmoidOp>(n);
  if (op == Op::reciprocal) return unary<T, ReciprocalOp>(n);
  return nullptr;
}

/// Body nodes whose bf16 result needs no rounding: a selection, a sign
/// change or a clamp at zero of bf16 values is a bf16 value, and `full`
/// rounds its constant once when the program is built.
bool exactInBf16(const Node& n) {
  const Op op = n.kind();
  return op == Op::where || op == Op::relu || op == Op::neg || op == Op::abs || op == Op::full;
}

template <class T>
std::shared_ptr<const Program<T>> compile(const Node& node) {
  auto p = std::make_shared<Program<T>>();
  p->body = std::get<GraphAttr>(*node.attr("body")).graph;
  std::unordered_map<const Value*, int> slot;
  for (const Value* v : p->body->inputs()) slot[v] = p->num_slots++;
  for (const auto& n : p->body->nodes()) {
    typename Program<T>::Instr ins;
    for (const Value* v : n->inputs()) ins.in.push_back(slot.at(v));
    ins.out = slot[n->output()] = p->num_slots++;
    ins.run = instruction<T>(*n);
    ins.round_bf16 = n->output()->dtype() == DType::BF16 && !exactInBf16(*n);
    if (!ins.run) opFail(node, "the CPU fused kernel cannot run '" + n->op() + "' in a body");
    p->instrs.push_back(std::move(ins));
  }
  for (const GraphOutput& o : p->body->outputs()) {
    p->output_slots.push_back(slot.at(o.value));
    p->output_dtypes.push_back(o.value->dtype());
  }
  return p;
}

/// Programs by body: compiled on first use, shared by every node and run
/// with the same body region (clones of a node share it). A program holds
/// its body, so no other body can take its address while it is cached; a
/// body only its program still holds belongs to no graph any more, and its
/// program is dropped when the next one is compiled (a long-lived process,
/// kiln-studio or Python, compiles many graphs).
template <class T>
std::shared_ptr<const Program<T>> programFor(const Node& n) {
  static std::mutex mu;
  static std::unordered_map<const Graph*, std::shared_ptr<const Program<T>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  const Graph* body = &n.subgraph("body");
  if (auto it = cache.find(body); it != cache.end()) return it->second;
  std::erase_if(cache, [](const auto& entry) { return entry.second->body.use_count() == 1; });
  return cache[body] = compile<T>(n);
}

/// Rounds each value to the nearest bf16 (kept in float): what storing it
/// as bf16 and reading it back gives.
KILN_SIMD_CLONES void roundToBf16(float* __restrict v, int64_t cnt) {
  for (int64_t i = 0; i < cnt; ++i) v[i] = bf16ToFloat(floatToBf16(v[i]));
}
template <class T>
void roundToBf16(T*, int64_t) {}

/// How a body reads each operand: in place (the loop shape, in the compute
/// type), as a splat (one element), converted block by block (the loop
/// shape, bf16 or bool), or gathered from a broadcast run (element
/// (i / inner) % numel) and converted where needed.
struct Operand {
  int64_t inner = 1, period = 1;
  bool in_place = false, splat = false, is_bool = false, is_bf16 = false, full = false;
};

std::vector<Operand> operandsOf(const Node& n, std::span<const Tensor> in, const Shape& loop) {
  const int64_t total = numelOf(loop);
  std::vector<Operand> ops(in.size());
  for (size_t k = 0; k < in.size(); ++k) {
    Operand& o = ops[k];
    o.is_bool = in[k].dtype() == DType::Bool;
    o.is_bf16 = in[k].dtype() == DType::BF16;
    o.period = in[k].numel();
    o.splat = o.period == 1;
    o.full = o.period == total;
    o.in_place = o.full && !o.is_bool && !o.is_bf16;
    if (!o.splat && o.period != total) {
      auto inner = broadcastRunInner(in[k].shape(), loop);
      if (!inner) opFail(n, "operand " + in[k].type().str() + " does not broadcast along one run of dims");
      o.inner = *inner;
    }
  }
  return ops;
}

/// Runs a body over ranges of its flat loop index. One Cursor per thread: its
/// scratch blocks (one per body value) stay in L1.
template <class T>
struct BodyEval {
  std::shared_ptr<const Program<T>> prog;
  std::span<const Tensor> in;
  std::vector<Operand> ops;

  struct Cursor {
    const BodyEval* e;
    std::vector<T> scratch;
    std::vector<const T*> slots, args;

    explicit Cursor(const BodyEval& ev)
        : e(&ev), scratch(static_cast<size_t>(ev.prog->num_slots) * kBlock), slots(ev.prog->num_slots) {
      for (size_t k = 0; k < ev.in.size(); ++k)
        if (ev.ops[k].splat) std::fill(block(k), block(k) + kBlock, load(k, 0));
      // Constants (`full`, no inputs) fill their blocks once, not per block.
      for (const auto& ins : ev.prog->instrs)
        if (ins.in.empty()) {
          ins.run(nullptr, block(ins.out), kBlock);
          slots[ins.out] = block(ins.out);
        }
    }
    T* block(size_t k) { return scratch.data() + k * kBlock; }
    T load(size_t k, int64_t idx) const {
      const Operand& o = e->ops[k];
      if (o.is_bool) return T(e->in[k].template data<bool>()[idx]);
      if (o.is_bf16) return T(bf16ToFloat(e->in[k].template data<BFloat16>()[idx].bits));
      return e->in[k].template data<T>()[idx];
    }
    /// Computes every body value for loop indices [b, b + cnt), cnt <= kBlock.
    void eval(int64_t b, int64_t cnt) {
      for (size_t k = 0; k < e->in.size(); ++k) {
        const Operand& o = e->ops[k];
        if (o.splat) {
          slots[k] = block(k);
        } else if (o.in_place) {
          slots[k] = e->in[k].template data<T>() + b;
        } else if (o.full && o.is_bf16) {
          T* dst = block(k);
          const BFloat16* src = e->in[k].template data<BFloat16>() + b;
          if constexpr (std::is_same_v<T, float>)
            rowFromBf16(src, dst, cnt);  // vector clones
          else
            for (int64_t i = 0; i < cnt; ++i) dst[i] = T(bf16ToFloat(src[i].bits));
          slots[k] = dst;
        } else {
          T* dst = block(k);
          int64_t r = b % o.inner, j = (b / o.inner) % o.period;
          for (int64_t i = 0; i < cnt; ++i) {
            dst[i] = load(k, j);
            if (++r == o.inner) {
              r = 0;
              if (++j == o.period) j = 0;
            }
          }
          slots[k] = dst;
        }
      }
      for (const auto& ins : e->prog->instrs) {
        if (ins.in.empty()) continue;  // a constant, filled by the constructor
        args.clear();
        for (int s : ins.in) args.push_back(slots[s]);
        T* o = block(ins.out);
        ins.run(args.data(), o, cnt);
        if (ins.round_bf16) roundToBf16(o, cnt);
        slots[ins.out] = o;
      }
    }
    /// Body output k of the last eval().
    const T* output(size_t k) const { return slots[e->prog->output_slots[k]]; }
    /// Stores body output k of the last eval() at [b, b + cnt) of `dst`.
    void store(size_t k, Tensor& dst, int64_t b, int64_t cnt) const {
      const T* src = output(k);
      if (e->prog->output_dtypes[k] == DType::Bool) {
        bool* d = dst.data<bool>() + b;
        for (int64_t i = 0; i < cnt; ++i) d[i] = src[i] != T(0);
      } else if (e->prog->output_dtypes[k] == DType::BF16) {
        BFloat16* d = dst.data<BFloat16>() + b;  // already rounded: exact
        if constexpr (std::is_same_v<T, float>)
          rowToBf16(src, d, cnt);  // vector clones
        else
          for (int64_t i = 0; i < cnt; ++i) d[i].bits = floatToBf16(static_cast<float>(src[i]));
      } else {
        std::copy(src, src + cnt, dst.data<T>() + b);
      }
    }
  };

  BodyEval(const Node& n, std::span<const Tensor> inputs, const Shape& loop)
      : prog(programFor<T>(n)), in(inputs), ops(operandsOf(n, inputs, loop)) {}
};

template <class T>
void runFused(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  for (size_t i = 0; i < n.numOutputs(); ++i) allocOutput(n, out, i);
  const BodyEval<T> ev(n, in, n.output(0)->shape());
  parallelFor(n.output(0)->type().numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
    typename BodyEval<T>::Cursor cur(ev);
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t cnt = std::min(kBlock, end - b);
      cur.eval(b, cnt);
      for (size_t k = 0; k < out.size(); ++k) cur.store(k, out[k], b, cnt);
    }
  });
}

/// fused_reduction's input to reduceDims: body output 0 computed on demand,
/// kBlock values at a time; each range is computed once (reduceDims reads
/// every element once), and the other body outputs are stored as it goes.
template <class T>
struct FusedSource {
  using Value = T;
  const BodyEval<T>* ev;
  std::span<Tensor> loop_outputs;  ///< node outputs 1.. = body outputs 1..
  int64_t chunk() const { return kBlock; }
  struct Cursor {
    typename BodyEval<T>::Cursor c;
    std::span<Tensor> outs;
    const T* rows(int64_t off, int64_t n) {
      c.eval(off, n);
      for (size_t k = 0; k < outs.size(); ++k) c.store(k + 1, outs[k], off, n);
      return c.output(0);
    }
  };
  Cursor cursor() const { return {typename BodyEval<T>::Cursor(*ev), loop_outputs}; }
};

template <class T>
void runFusedReduction(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  for (size_t i = 0; i < n.numOutputs(); ++i) allocOutput(n, out, i);
  const Shape loop = programFor<T>(n)->body->outputs()[0].value->shape();
  const BodyEval<T> ev(n, in, loop);
  const std::vector<int64_t> axes = reductionAxes(n, n.is("dims"), static_cast<int64_t>(loop.size()));
  const FusedSource<T> src{&ev, out.subspan(1)};
  if (n.s("reduce") == "mean")
    reduceDims(src, loop, axes, out[0].data<T>(), MeanRed<T>{});
  else
    reduceDims(src, loop, axes, out[0].data<T>(), SumRed<T, T>{});
}

/// The compute dtype of a fused node: that of its first floating operand.
DType computeType(std::span<const Tensor> in) {
  for (const Tensor& x : in)
    if (x.dtype() == DType::F32 || x.dtype() == DType::F64) return x.dtype();
  return DType::F32;
}

void fusedReductionKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  if (computeType(in) == DType::F64)
    runFusedReduction<double>(n, in, out);
  else
    runFusedReduction<float>(n, in, out);
}

void fusedKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  if (computeType(in) == DType::F64)
    runFused<double>(n, in, out);
  else
    runFused<float>(n, in, out);
}

}  // namespace

/// Whether the CPU fused kernel implements `op` inside a body (tests check
/// this covers passes/fuse.h's fusibleOps()).
bool cpuFusedKernelSupports(const Node& n) {
  return instruction<float>(n) != nullptr;
}

}  // namespace kiln::cpu

namespace kiln {

void registerCpuFusedKernels(KernelRegistry& r) {
  // A block of every input is read into the body before its outputs are
  // stored (BodyEval::eval, then store), so a lone output may overwrite an input.
  KernelDef fused{"fused_elementwise", "cpu", "cpu.fused_elementwise", 10, nullptr, cpu::fusedKernel};
  fused.writes_over_input = true;
  r.add(std::move(fused));
  r.add({"fused_reduction", "cpu", "cpu.fused_reduction", 10, nullptr, cpu::fusedReductionKernel});
}

}  // namespace kiln
