// fx export of the optimizer ops (core/ops/optim.cpp, row_sparse.cpp),
// which have no aten op: each parameter group becomes the aten sequence of
// Kiln's CPU kernel (backend/cpu/kernels_optim.cpp, kernels_row_sparse.cpp),
// which is torch.optim's single-tensor formula in torch.optim's order.
//
//  - Elementwise work runs in the parameter's dtype, one aten op per
//    operation of the kernel (no fused add-with-alpha: aten's may use an
//    FMA where the kernel rounds twice). Hyper-parameters the kernel rounds
//    to the dtype (momentum, 1 - dampening, betas, eps, weight decay) are
//    Python scalars, which aten rounds to the dtype the same way.
//  - What the kernel computes in double from the 0-d lr / step / grad_scale
//    inputs (bias corrections, step size, -lr, AdamW's 1 - lr * wd) is done
//    on those f64 tensors with aten ops, then cast to the dtype once, as the
//    kernel's static_cast does.
//  - The data-dependent branches become `where`: SGD's first step (step <= 1:
//    the momentum buffer starts as the gradient) and skip_nonfinite (amp: a
//    non-finite grad_scale keeps every parameter and state as it was).
#include <map>

#include "core/export/fx_python_ops.h"

namespace kiln::fx {
namespace {

constexpr size_t kScalars = 3;  // lr, step, grad_scale

/// The per-node 0-d values, computed once per parameter dtype.
class Scalars {
 public:
  Scalars(Emitter& e, const Node& n) : e_(e), n_(n) {}
  const std::string& lr() const { return e_.in(n_, 0); }
  const std::string& step() const { return e_.in(n_, 1); }
  /// grad_scale in dtype t.
  const std::string& scale(DType t) {
    return memo("scale", t, [&] { return cast(e_.in(n_, 2), 2, t); });
  }
  /// -lr in dtype t.
  const std::string& negLr(DType t) {
    return memo("neg_lr", t, [&] { return cast(e_.call("aten.neg.default", {lr()}), 0, t); });
  }
  /// isfinite(grad_scale), for skip_nonfinite.
  const std::string& finite() {
    return memo("finite", DType::Bool, [&] { return e_.call("aten.isfinite.default", {e_.in(n_, 2)}); });
  }
  /// A value computed by `make` from the f64 scalars, converted to dtype t once.
  template <class F>
  const std::string& memo(const std::string& key, DType t, F make) {
    auto k = std::make_pair(key, t);
    auto it = cache_.find(k);
    if (it == cache_.end()) it = cache_.emplace(k, make()).first;
    return it->second;
  }
  /// Input `in` (0-d) converted to t.
  std::string cast(const std::string& x, size_t in, DType t) { return e_.cast(x, n_.input(in)->dtype(), t); }
  std::string castF64(const std::string& x, DType t) { return e_.cast(x, DType::F64, t); }

 private:
  Emitter& e_;
  const Node& n_;
  std::map<std::pair<std::string, DType>, std::string> cache_;
};

std::string mul(Emitter& e, const std::string& a, const std::string& b) {
  return e.call("aten.mul.Tensor", {a, b});
}
std::string add(Emitter& e, const std::string& a, const std::string& b) {
  return e.call("aten.add.Tensor", {a, b});
}
std::string mulScalar(Emitter& e, const std::string& a, double s) {
  return e.call("aten.mul.Scalar", {a, pyFloat(s)});
}

/// skip_nonfinite: `updated` where grad_scale is finite, else the input as it was.
std::string keepIfSkipped(Emitter& e, const Node& n, Scalars& s, const std::string& updated, const std::string& old) {
  if (!n.i("skip_nonfinite")) return updated;
  return e.call("aten.where.self", {s.finite(), updated, old});
}

// ---- SGD ----------------------------------------------------------------------------

void emitSgd(Emitter& e, const Node& n) {
  const double momentum = n.f("momentum"), wd = n.f("weight_decay");
  const bool has_buf = momentum != 0, nesterov = n.i("nesterov") != 0;
  const size_t per = has_buf ? 3 : 2, out_per = has_buf ? 2 : 1;
  Scalars s(e, n);
  std::string first;  // step <= 1: the buffer starts as the gradient
  if (has_buf) first = e.call("aten.le.Scalar", {s.step(), "1"});
  for (size_t g = kScalars, k = 0; g < n.numInputs(); g += per, k += out_per) {
    const DType t = n.input(g)->dtype();
    const std::string& p = e.in(n, g);
    std::string d = mul(e, e.in(n, g + 1), s.scale(t));  // grad * scale
    if (wd != 0) d = add(e, d, mulScalar(e, p, wd));     // grad.add(param, alpha=weight_decay)
    if (has_buf) {
      const std::string& buf = e.in(n, g + 2);     // buf.mul_(momentum).add_(d, alpha=1 - dampening)
      const double keep = 1.0 - n.f("dampening");  // 1: keep * d is d, exactly
      std::string later = add(e, mulScalar(e, buf, momentum), keep == 1.0 ? d : mulScalar(e, d, keep));
      std::string b = e.call("aten.where.self", {first, d, later});
      e.setOut(n, k + 1, keepIfSkipped(e, n, s, b, buf));
      d = nesterov ? add(e, d, mulScalar(e, b, momentum)) : b;
    }
    std::string updated = add(e, p, mul(e, s.negLr(t), d));  // param.add_(d, alpha=-lr)
    e.setOut(n, k, keepIfSkipped(e, n, s, updated, p));
  }
}

// ---- Adam / AdamW -------------------------------------------------------------------

void emitAdam(Emitter& e, const Node& n) {
  const double b1 = n.f("beta1"), b2 = n.f("beta2"), wd = n.f("weight_decay"), eps = n.f("eps");
  const bool decoupled = n.i("decoupled") != 0;
  Scalars s(e, n);
  // Host-side math of torch.optim (Python floats, i.e. double): on the f64 scalars.
  auto f64 = [&](const std::string& x) { return s.cast(x, 1, DType::F64); };
  const std::string step = f64(s.step());
  const std::string lr = s.cast(s.lr(), 0, DType::F64);
  const std::string bias1 = e.call("aten.rsub.Scalar", {e.call("aten.pow.Scalar", {pyFloat(b1), step}), "1"});
  const std::string bias2 = e.call("aten.rsub.Scalar", {e.call("aten.pow.Scalar", {pyFloat(b2), step}), "1"});
  for (size_t g = kScalars, k = 0; g < n.numInputs(); g += 4, k += 3) {
    const DType t = n.input(g)->dtype();
    const std::string& step_size = s.memo("step_size", t, [&] {  // -(lr / bias_correction1)
      return s.castF64(e.call("aten.neg.default", {e.call("aten.div.Tensor", {lr, bias1})}), t);
    });
    const std::string& bias2_sqrt =
        s.memo("bias2_sqrt", t, [&] { return s.castF64(e.call("aten.sqrt.default", {bias2}), t); });
    const std::string &p = e.in(n, g), &m = e.in(n, g + 2), &v = e.in(n, g + 3);
    // A bf16 gradient (the fold of amp's cast) is widened first, as the cast did.
    const DType gt = n.input(g + 1)->dtype();
    std::string grad = mul(e, gt == t ? e.in(n, g + 1) : e.cast(e.in(n, g + 1), gt, t), s.scale(t));
    std::string param = p;
    if (decoupled) {  // AdamW: param.mul_(1 - lr * weight_decay)
      const std::string& decay = s.memo("decay", t, [&] {
        return s.castF64(e.call("aten.rsub.Scalar", {e.call("aten.mul.Scalar", {lr, pyFloat(wd)}), "1"}), t);
      });
      param = mul(e, p, decay);
    } else if (wd != 0) {  // grad.add(param, alpha=weight_decay)
      grad = add(e, grad, mulScalar(e, param, wd));
    }
    std::string mi = add(e, mulScalar(e, m, b1), mulScalar(e, grad, 1 - b1));  // exp_avg.mul_(b1).add_(g, 1 - b1)
    std::string vi = add(e, mulScalar(e, v, b2), mul(e, mulScalar(e, grad, 1 - b2), grad));  // .addcmul_(g, g, 1 - b2)
    std::string denom =  // (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        e.call("aten.add.Scalar",
               {e.call("aten.div.Tensor", {e.call("aten.sqrt.default", {vi}), bias2_sqrt}), pyFloat(eps)});
    std::string updated = add(e, param, mul(e, step_size, e.call("aten.div.Tensor", {mi, denom})));
    e.setOut(n, k, keepIfSkipped(e, n, s, updated, p));
    e.setOut(n, k + 1, keepIfSkipped(e, n, s, mi, m));
    e.setOut(n, k + 2, keepIfSkipped(e, n, s, vi, v));
  }
}

/// sqrt(sum of all squares), accumulated in double as Kiln's kernel does.
void emitGlobalNorm(Emitter& e, const Node& n) {
  std::string total;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    std::string x = e.cast(e.in(n, i), n.input(i)->dtype(), DType::F64);
    std::string sq = e.call("aten.sum.default", {mul(e, x, x)});
    total = total.empty() ? sq : add(e, total, sq);
  }
  e.setOut(n, 0, e.cast(e.call("aten.sqrt.default", {total}), DType::F64, n.output()->dtype()));
}

// ---- row-sparse gradients -----------------------------------------------------------

/// The dense [num_rows, dim] tensor of (rows, values): rows past the real
/// ones are -1 and go to a spare row that is cut off.
std::string rowsToDense(Emitter& e, const std::string& rows, const std::string& values, int64_t num, int64_t dim) {
  std::string target = e.call("aten.where.ScalarOther", {e.call("aten.ge.Scalar", {rows, "0"}), rows, pyInt(num)});
  std::string spare = e.call("aten.new_zeros.default", {values, pyInts({num + 1, dim})});
  std::string dense = e.call("aten.index_copy.default", {spare, "0", target, values});
  return e.call("aten.slice.Tensor", {dense, "0", "0", pyInt(num), "1"});
}

void emitRowsToDense(Emitter& e, const Node& n) {
  e.setOut(n, 0, rowsToDense(e, e.in(n, 0), e.in(n, 1), n.i("num_rows"), n.output()->shape()[1]));
}

/// The dense update of a gradient that is zero off the listed rows, which
/// leaves those rows as they were: Kiln's row kernel computes the same.
void emitSgdUpdateRows(Emitter& e, const Node& n) {
  const Shape& p_shape = n.input(3)->shape();
  const DType t = n.input(3)->dtype();
  Scalars s(e, n);
  std::string grad = rowsToDense(e, e.in(n, 4), e.in(n, 5), p_shape[0], p_shape[1]);
  std::string updated = add(e, e.in(n, 3), mul(e, s.negLr(t), mul(e, grad, s.scale(t))));
  e.setOut(n, 0, keepIfSkipped(e, n, s, updated, e.in(n, 3)));
}

/// The rows the batch touched (ascending, padding_idx excepted, then -1)
/// and their summed gradients, from the dense embedding gradient.
void emitEmbeddingBackwardRows(Emitter& e, const Node& n) {
  const int64_t num = n.i("num_weights"), pad = n.i("padding_idx");
  const int64_t count = n.input(1)->type().numel();
  const std::string idx = e.cast(e.in(n, 1), n.input(1)->dtype(), DType::I64);
  std::string dense = e.call("aten.embedding_dense_backward.default",
                             {e.in(n, 0), idx, pyInt(num), pyInt(pad >= 0 && pad < num ? pad : -1), "False"});
  std::string touched = e.call("aten.full.default", {pyInts({num}), "False"}, {"dtype=torch.bool", "device=device"});
  touched = e.call("aten.index_fill.int_Scalar",
                   {touched, "0", e.call("aten.reshape.default", {idx, pyInts({count})}), "True"});
  if (pad >= 0 && pad < num)
    touched = e.call("aten.index_fill.int_Scalar", {touched, "0", e.intsConst({pad}), "False"});
  std::string ids = e.call("aten.arange.start_step", {"0", pyInt(num), "1"}, {"dtype=torch.int64", "device=device"});
  std::string keys = e.call("aten.where.ScalarOther", {touched, ids, pyInt(num)});  // untouched sort last
  if (count > num)
    keys = e.call("aten.cat.default", {"[" + keys + ", " +
                                           e.call("aten.full.default", {pyInts({count - num}), pyInt(num)},
                                                  {"dtype=torch.int64", "device=device"}) +
                                           "]",
                                       "0"});
  std::string sorted = e.item(e.call("aten.sort.default", {keys}), 0);
  sorted = e.call("aten.slice.Tensor", {sorted, "0", "0", pyInt(count), "1"});
  std::string real = e.call("aten.lt.Scalar", {sorted, pyInt(num)});
  e.setOut(n, 0, e.call("aten.where.ScalarOther", {real, sorted, "-1"}));
  std::string rows =
      e.call("aten.index_select.default", {dense, "0", e.call("aten.where.ScalarOther", {real, sorted, "0"})});
  std::string keep = e.call("aten.unsqueeze.default", {real, "1"});
  e.setOut(n, 1, e.call("aten.where.ScalarOther", {keep, rows, "0.0"}));
}

}  // namespace

void addOptimizerEmitters(EmitTable& t) {
  t["sgd_update"] = emitSgd;
  t["adam_update"] = emitAdam;
  t["global_norm"] = emitGlobalNorm;
  t["rows_to_dense"] = emitRowsToDense;
  t["sgd_update_rows"] = emitSgdUpdateRows;
  t["embedding_backward_rows"] = emitEmbeddingBackwardRows;
}

}  // namespace kiln::fx
