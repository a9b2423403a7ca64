// aten -> Kiln: recurrent layers (nn.RNN, nn.LSTM, nn.GRU), unrolled over the
// trace's static sequence length into ordinary graph ops, so autodiff, fusion
// and the memory plan see every step. Per layer and direction the input
// projection of all time steps is one linear ([T, B, in] -> [T, B, G*H]);
// each step adds the hidden projection and applies PyTorch's cell:
//   RNN:  h' = tanh|relu(x W_ih^T + b_ih + h W_hh^T + b_hh)
//   LSTM: i, f, g, o = split(...); c' = sigmoid(f) c + sigmoid(i) tanh(g);
//         h' = sigmoid(o) tanh(c')
//   GRU:  r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z); n = tanh(x_n + r h_n);
//         h' = n + z (h - n)   (PyTorch's gru_cell form)
// Multi-layer, bidirectional (the reverse direction reads t = T-1 .. 0),
// batch_first, unbatched inputs, dropout between layers in training, LSTM
// projections (proj_size: h' = (sigmoid(o) tanh(c')) W_hr^T). The cells
// (nn.LSTMCell, nn.GRUCell, nn.RNNCell: lstm_cell, gru_cell, rnn_tanh_cell,
// rnn_relu_cell) are one such step. Packed sequences
// (pack_padded_sequence) are refused: their shape is the sum of the lengths,
// known only from the data.
#include "core/import/torchscript/lowering.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Out = std::vector<SV>;

enum class Cell { RnnTanh, RnnRelu, Lstm, Gru };

Cell cellOf(std::string_view op) {
  return op == "lstm" || op == "lstm_cell" ? Cell::Lstm
         : op == "gru" || op == "gru_cell" ? Cell::Gru
         : op == "rnn_relu" || op == "rnn_relu_cell" ? Cell::RnnRelu
                                                     : Cell::RnnTanh;
}

int64_t gatesOf(Cell c) { return c == Cell::Lstm ? 4 : c == Cell::Gru ? 3 : 1; }

Value* reshaped(Lowering& cx, Value* v, const Shape& s) {
  return v->shape() == s ? v : cx.emit("reshape", {v}, {{"shape", s}});
}

/// The `gates` equal pieces of [B, gates * H] along dim 1.
std::vector<Value*> splitGates(Lowering& cx, Value* v, int64_t gates) {
  if (gates == 1) return {v};
  const int64_t h = v->shape()[1] / gates;
  Node* n = cx.emitNode("split", {v}, {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>(gates, h)}});
  std::vector<Value*> out;
  for (int64_t k = 0; k < gates; ++k) out.push_back(n->output(k));
  return out;
}

Value* sig(Lowering& cx, Value* v) { return cx.emit("sigmoid", {v}); }
Value* tanhOf(Lowering& cx, Value* v) { return cx.emit("tanh", {v}); }

struct Weights {
  Value *w_ih, *w_hh, *b_ih = nullptr, *b_hh = nullptr;
  Value* w_hr = nullptr;  ///< LSTM projection [P, H] (proj_size > 0)
};

/// One layer in one direction over x [T, B, in] from h0 (and c0) [B, H]:
/// returns every step's h [T] and the final h and c.
struct Pass {
  std::vector<Value*> hs;
  Value *h, *c = nullptr;
};

/// One step of `cell` from xt = x W_ih^T + b_ih [B, gates * H]: updates h
/// (and c for an LSTM).
void step(Lowering& cx, Cell cell, Value* xt, const Weights& w, Value*& h, Value*& c) {
  std::vector<Value*> hin = {h, w.w_hh};
  if (w.b_hh) hin.push_back(w.b_hh);
  Value* hp = cx.emit("linear", hin);
  if (cell == Cell::Gru) {
    auto xg = splitGates(cx, xt, 3), hg = splitGates(cx, hp, 3);
    Value* r = sig(cx, cx.emit("add", {xg[0], hg[0]}));
    Value* z = sig(cx, cx.emit("add", {xg[1], hg[1]}));
    Value* n = tanhOf(cx, cx.emit("add", {xg[2], cx.emit("mul", {r, hg[2]})}));
    h = cx.emit("add", {n, cx.emit("mul", {z, cx.emit("sub", {h, n})})});
    return;
  }
  auto g = splitGates(cx, cx.emit("add", {xt, hp}), gatesOf(cell));
  if (cell == Cell::Lstm) {
    c = cx.emit("add", {cx.emit("mul", {sig(cx, g[1]), c}), cx.emit("mul", {sig(cx, g[0]), tanhOf(cx, g[2])})});
    h = cx.emit("mul", {sig(cx, g[3]), tanhOf(cx, c)});
    if (w.w_hr) h = cx.emit("linear", {h, w.w_hr});
  } else {
    h = cell == Cell::RnnTanh ? tanhOf(cx, g[0]) : cx.emit("relu", {g[0]});
  }
}

Pass runDirection(Lowering& cx, Cell cell, Value* x, const Weights& w, Value* h, Value* c, bool reverse) {
  const int64_t steps = x->shape()[0];
  std::vector<Value*> xin = {x, w.w_ih};
  if (w.b_ih) xin.push_back(w.b_ih);
  Value* xp = cx.emit("linear", xin);  // [T, B, gates * H]
  // One split into the T steps (its gradient is one cat; a select per step
  // would give each step's gradient the whole [T, B, gates * H] shape).
  Node* xs = cx.emitNode("split", {xp}, {{"dim", int64_t{0}}, {"sizes", std::vector<int64_t>(steps, 1)}});
  Pass p;
  p.hs.assign(static_cast<size_t>(steps), nullptr);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    step(cx, cell, reshaped(cx, xs->output(t), {xp->shape()[1], xp->shape()[2]}), w, h, c);
    p.hs[t] = h;
  }
  p.h = h;
  p.c = c;
  return p;
}

/// [B, H] values -> one [n, B, H] tensor.
Value* stackFirst(Lowering& cx, const std::vector<Value*>& vs) {
  std::vector<Value*> rows;
  for (Value* v : vs) {
    Shape s = v->shape();
    s.insert(s.begin(), 1);
    rows.push_back(reshaped(cx, v, s));
  }
  return rows.size() == 1 ? rows[0] : cx.emit("cat", rows, {{"dim", int64_t{0}}});
}

// lstm(input, hx[h0, c0], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
//   -> (output, h_n, c_n)
// gru / rnn_tanh / rnn_relu(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
//   batch_first) -> (output, h_n)
Out lowerRnn(Lowering& cx, Args& a) {
  const Cell cell = cellOf(a.kiln_op);
  if (a[1].isTensorLike() == (cell == Cell::Lstm) || a[2].kind != SV::Kind::List)
    fail(std::string(a.kiln_op) + " with packed sequences (the .data overload) is not supported");
  Value* x = a.tensor(0);
  std::vector<Value*> hx;
  if (cell == Cell::Lstm)
    for (const SV& v : a[1].elems()) hx.push_back(cx.read(v));
  else
    hx.push_back(a.tensor(1));
  std::vector<Value*> params;
  for (const SV& v : a[2].elems()) params.push_back(cx.read(v));
  const bool biases = a.flag(3), train = a.flag(6), bidirectional = a.flag(7), batch_first = a.flag(8);
  const int64_t layers = a.integer(4), dirs = bidirectional ? 2 : 1;
  const double dropout = a.real(5);
  // Per layer and direction: w_ih, w_hh[, b_ih, b_hh][, w_hr] (an LSTM's
  // projection, proj_size > 0), in nn.LSTM's _flat_weights order.
  const size_t cells = static_cast<size_t>(layers * dirs);
  const bool projected = cell == Cell::Lstm && cells > 0 && params.size() == ((biases ? 4 : 2) + 1) * cells;
  const size_t per = (biases ? 4 : 2) + (projected ? 1 : 0);
  if (params.size() != per * cells)
    fail(std::string(a.kiln_op) + ": " + std::to_string(params.size()) + " weights for " + std::to_string(layers) +
         " layers x " + std::to_string(dirs) + " directions");
  if (!isFloating(x->dtype())) fail(std::string(a.kiln_op) + " needs a floating-point input, got " + x->type().str());
  const bool unbatched = x->type().rank() == 2;
  if (x->type().rank() != 3 && !unbatched)
    fail(std::string(a.kiln_op) + " expects a 2-D or 3-D input, got " + x->type().str());
  if (unbatched) {  // [T, in] -> [T, 1, in]; hx [L*D, H] -> [L*D, 1, H]
    x = reshaped(cx, x, {x->shape()[0], 1, x->shape()[1]});
    for (Value*& v : hx) v = reshaped(cx, v, {v->shape()[0], 1, v->shape()[1]});
  } else if (batch_first) {
    x = cx.emit("permute", {x}, {{"dims", std::vector<int64_t>{1, 0, 2}}});
  }
  std::vector<Value*> h_n, c_n;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<Value*> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const size_t at = per * static_cast<size_t>(l * dirs + d);
      Weights w{params[at], params[at + 1]};
      if (biases) w.b_ih = params[at + 2], w.b_hh = params[at + 3];
      if (projected) w.w_hr = params[at + per - 1];
      const int64_t idx = l * dirs + d;
      Value* h0 = cx.emit("select", {hx[0]}, {{"dim", int64_t{0}}, {"index", idx}});
      Value* c0 = cell == Cell::Lstm ? cx.emit("select", {hx[1]}, {{"dim", int64_t{0}}, {"index", idx}}) : nullptr;
      Pass p = runDirection(cx, cell, x, w, h0, c0, d == 1);
      outs.push_back(stackFirst(cx, p.hs));
      h_n.push_back(p.h);
      if (p.c) c_n.push_back(p.c);
    }
    x = outs.size() == 1 ? outs[0] : cx.emit("cat", outs, {{"dim", int64_t{2}}});
    if (train && dropout > 0 && l + 1 < layers)
      x = cx.emitNode("dropout", {x}, {{"p", dropout}, {"training", int64_t{1}}})->output(0);
  }
  Value* hn = stackFirst(cx, h_n);
  Value* cn = c_n.empty() ? nullptr : stackFirst(cx, c_n);
  if (unbatched) {
    x = reshaped(cx, x, {x->shape()[0], x->shape()[2]});
    hn = reshaped(cx, hn, {hn->shape()[0], hn->shape()[2]});
    if (cn) cn = reshaped(cx, cn, {cn->shape()[0], cn->shape()[2]});
  } else if (batch_first) {
    x = cx.emit("permute", {x}, {{"dims", std::vector<int64_t>{1, 0, 2}}});
  }
  Out out = {cx.fresh(x), cx.fresh(hn)};
  if (cn) out.push_back(cx.fresh(cn));
  return out;
}

// lstm_cell(input, hx[h, c], w_ih, w_hh, b_ih=None, b_hh=None) -> (h', c')
// gru_cell / rnn_tanh_cell / rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None) -> h'
// (nn.LSTMCell, nn.GRUCell, nn.RNNCell: one step, the loop is the model's).
// _pack_padded_sequence(input, lengths, batch_first) -> (data, batch_sizes)
Out refusePacked(Lowering&, Args&) {
  fail("packed sequences (pack_padded_sequence) have a data-dependent shape (the sum of the lengths); Kiln needs "
       "static shapes: run the recurrent layer on the padded batch and mask the padded steps instead");
}

Out lowerCell(Lowering& cx, Args& a) {
  const Cell cell = cellOf(a.kiln_op);
  Value* x = a.tensor(0);
  Value *h = nullptr, *c = nullptr;
  if (cell == Cell::Lstm) {
    std::vector<Value*> hx;
    for (const SV& v : a[1].elems()) hx.push_back(cx.read(v));
    if (hx.size() != 2) fail("lstm_cell expects hx = (h, c), got " + std::to_string(hx.size()) + " tensors");
    h = hx[0], c = hx[1];
  } else {
    h = a.tensor(1);
  }
  if (!isFloating(x->dtype())) fail(std::string(a.kiln_op) + " needs a floating-point input, got " + x->type().str());
  if (x->type().rank() != 2 || h->type().rank() != 2)
    fail(std::string(a.kiln_op) + " expects a [batch, features] input and state, got " + x->type().str() + " and " +
         h->type().str());
  Weights w{a.tensor(2), a.tensor(3)};
  if (a.given(4)) w.b_ih = a.tensor(4);
  if (a.given(5)) w.b_hh = a.tensor(5);
  std::vector<Value*> xin = {x, w.w_ih};
  if (w.b_ih) xin.push_back(w.b_ih);
  step(cx, cell, cx.emit("linear", xin), w, h, c);
  Out out = {cx.fresh(h)};
  if (c) out.push_back(cx.fresh(c));
  return out;
}

const AtenRule kRules[] = {
    {"aten::lstm", lowerRnn, "lstm"},
    {"aten::gru", lowerRnn, "gru"},
    {"aten::rnn_tanh", lowerRnn, "rnn_tanh"},
    {"aten::rnn_relu", lowerRnn, "rnn_relu"},
    {"aten::lstm_cell", lowerCell, "lstm_cell"},
    {"aten::gru_cell", lowerCell, "gru_cell"},
    {"aten::rnn_tanh_cell", lowerCell, "rnn_tanh_cell"},
    {"aten::rnn_relu_cell", lowerCell, "rnn_relu_cell"},
    {"aten::_pack_padded_sequence", refusePacked},
};

}  // namespace

std::span<const AtenRule> rnnRules() { return kRules; }

}  // namespace kiln::ts
