// Shared decompositions (see common.h): 1-D and 2-D convolutions and their
// transposed forms, scaled dot-product attention, RMSNorm and einsum.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/import/decompositions/common.h"

namespace kiln::decomp {

/// A convolution's attributes, each list one entry per spatial dim (1 or 2).
struct ConvSpec {
  std::vector<int64_t> stride, padding, dilation, output_padding;  ///< output_padding: transposed only
  int64_t groups = 1;
  bool transposed = false;
};

/// conv1d/conv2d and conv_transpose1d/2d of x ([N,] C, [H,] W) and w (rank
/// spatial + 2), with an optional bias b [C_out]. A transposed convolution is
/// conv2d's input gradient: x plays the output gradient and w
/// [C_in, C_out/groups, kh, kw] conv2d's weight (op_helpers'
/// transposedConvOutput gives its shape). 1-D runs through an inserted H = 1
/// dim (stride/padding/dilation 1/0/1 there), unbatched input through N = 1.
template <class Cx>
Value* convolution(Cx& cx, Value* x, Value* w, Value* b, ConvSpec c) {
  const int64_t spatial = w->type().rank() - 2;
  if (spatial != 1 && spatial != 2)
    fail(std::to_string(spatial) + "-d convolution is not supported (Kiln has conv2d; conv1d maps onto it)");
  const bool batched = x->type().rank() == spatial + 2;
  if (!batched && x->type().rank() != spatial + 1)
    fail(x->type().str() + " does not match a " + std::to_string(spatial) + "-d convolution");
  Shape in = x->shape();
  if (!batched) in.insert(in.begin(), 1);
  if (spatial == 1) {
    in.insert(in.end() - 1, 1);
    Shape ws = w->shape();
    ws.insert(ws.end() - 1, 1);
    w = reshapedTo(cx, w, ws);
    c.stride.insert(c.stride.begin(), 1);
    c.padding.insert(c.padding.begin(), 0);
    c.dilation.insert(c.dilation.begin(), 1);
    if (c.transposed) c.output_padding.insert(c.output_padding.begin(), 0);
  }
  x = reshapedTo(cx, x, in);
  AttrMap attrs = {{"stride", c.stride}, {"padding", c.padding}, {"dilation", c.dilation}, {"groups", c.groups}};
  Value* y = nullptr;
  if (c.transposed) {
    attrs["input_shape"] =
        transposedConvOutput(in, w->shape(), c.stride, c.padding, c.dilation, c.output_padding, c.groups);
    y = cx.emit("conv2d_input_backward", {x, w}, std::move(attrs));
    if (b) y = cx.emit("add", {y, reshapedTo(cx, b, {b->shape()[0], 1, 1})});
  } else {
    std::vector<Value*> inputs = {x, w};
    if (b) inputs.push_back(b);
    y = cx.emit("conv2d", inputs, std::move(attrs));
  }
  Shape out = y->shape();
  if (spatial == 1) out.erase(out.end() - 2);
  if (!batched) out.erase(out.begin());
  return reshapedTo(cx, y, out);
}

/// torch.einsum(equation, operands): each operand's subscripts (with `...`
/// for broadcast dims), an optional `->` output (else the letters used once,
/// sorted, after the broadcast dims). Operands are contracted left to right
/// as PyTorch does: letters used by one operand only and not kept are
/// summed first; each pair becomes one batched matmul over
/// [batch, kept-of-A, contracted] x [batch, contracted, kept-of-B]; letters
/// left over are summed at the end and the result permuted to the output.
/// Repeated letters within one operand (diagonals, "ii->i") fail.
template <class Cx>
Value* einsum(Cx& cx, const std::string& equation, const std::vector<Value*>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != operands.size())
    fail("einsum: " + quoteText(equation) + " has " + std::to_string(terms.size()) + " operands, " +
         std::to_string(operands.size()) + " tensors were given");
  // Broadcast dims ("...") become letters of their own: '0'..'9' then more, right-aligned.
  int64_t ell = 0;
  for (size_t k = 0; k < terms.size(); ++k)
    if (terms[k].find("...") != std::string::npos)
      ell = std::max<int64_t>(ell, operands[k]->type().rank() - static_cast<int64_t>(terms[k].size() - 3));
  auto ellLetters = [&](int64_t n) {
    std::string l;
    for (int64_t i = ell - n; i < ell; ++i) l += static_cast<char>(1 + i);  // control characters: never user letters
    return l;
  };
  std::vector<std::string> subs;
  for (size_t k = 0; k < terms.size(); ++k) {
    std::string t = terms[k];
    const size_t dots = t.find("...");
    if (dots != std::string::npos)
      t = t.substr(0, dots) + ellLetters(operands[k]->type().rank() - static_cast<int64_t>(t.size() - 3)) +
          t.substr(dots + 3);
    if (static_cast<int64_t>(t.size()) != operands[k]->type().rank())
      fail("einsum: operand " + std::to_string(k) + " is " + operands[k]->type().str() + ", its subscripts " +
           quoteText(terms[k]) + " name " + std::to_string(t.size()) + " dims");
    for (size_t i = 0; i < t.size(); ++i)
      if (t.find(t[i], i + 1) != std::string::npos)
        fail("einsum: " + quoteText(equation) + " repeats a subscript within one operand (a diagonal); not supported");
    subs.push_back(t);
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    const size_t dots = out.find("...");
    if (dots != std::string::npos) out = out.substr(0, dots) + ellLetters(ell) + out.substr(dots + 3);
  } else {
    std::map<char, int> count;
    for (const std::string& t : subs)
      for (char c : t) count[c]++;
    out = ellLetters(ell);
    for (const auto& [c, n] : count)
      if (n == 1 && static_cast<unsigned char>(c) > static_cast<unsigned char>(ell)) out += c;
  }
  // The size of every letter (broadcast: the one that is not 1).
  std::map<char, int64_t> size;
  for (size_t k = 0; k < subs.size(); ++k)
    for (size_t i = 0; i < subs[k].size(); ++i) {
      const int64_t n = operands[k]->shape()[i];
      auto [it, fresh] = size.emplace(subs[k][i], n);
      if (!fresh && it->second != n) {
        if (it->second != 1 && n != 1)
          fail("einsum: subscript " + std::string(1, subs[k][i]) + " has sizes " + std::to_string(it->second) +
               " and " + std::to_string(n));
        it->second = std::max(it->second, n);
      }
    }
  for (char c : out)
    if (!size.count(c)) fail("einsum: output subscript " + std::string(1, c) + " appears in no operand");
  // Letters still needed after operand k: the output's and later operands'.
  auto neededAfter = [&](size_t k) {
    std::string need = out;
    for (size_t j = k + 1; j < subs.size(); ++j) need += subs[j];
    return need;
  };
  auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  // Sum the dims of `v` (letters `l`) that `keep` does not name.
  auto sumOut = [&](Value* v, std::string& l, const std::string& keep) {
    std::vector<int64_t> dims;
    std::string left;
    for (size_t i = 0; i < l.size(); ++i)
      if (has(keep, l[i]))
        left += l[i];
      else
        dims.push_back(static_cast<int64_t>(i));
    l = left;
    if (dims.empty()) return v;
    return cx.emit("sum", {v}, {{"dims", dims}, {"keepdim", int64_t{0}}});
  };
  // `v` (letters `l`) permuted to `order` and reshaped to `groups` (sizes broadcast to the letters' sizes).
  auto arrange = [&](Value* v, const std::string& l, const std::string& order, const std::vector<std::string>& groups) {
    std::vector<int64_t> perm;
    for (char c : order) perm.push_back(static_cast<int64_t>(l.find(c)));
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
    if (!identity) v = cx.emit("permute", {v}, {{"dims", perm}});
    Shape full;
    for (char c : order) full.push_back(size[c]);
    v = expandedTo(cx, v, full);
    Shape g;
    for (const std::string& grp : groups) {
      int64_t n = 1;
      for (char c : grp) n *= size[c];
      g.push_back(n);
    }
    return reshapedTo(cx, v, g);
  };
  std::string acc_l = subs[0];
  Value* acc = sumOut(operands[0], acc_l, neededAfter(0) + "");
  for (size_t k = 1; k < subs.size(); ++k) {
    std::string bl = subs[k];
    const std::string need = neededAfter(k);
    Value* b = sumOut(operands[k], bl, need + acc_l);
    std::string batch, contract, a_only, b_only;
    for (char c : acc_l) {
      if (has(bl, c)) (has(need, c) ? batch : contract) += c;
      else a_only += c;
    }
    for (char c : bl)
      if (!has(acc_l, c)) b_only += c;
    Value* am = arrange(acc, acc_l, batch + a_only + contract, {batch, a_only, contract});
    Value* bm = arrange(b, bl, batch + contract + b_only, {batch, contract, b_only});
    Value* prod = cx.emit("matmul", {am, bm});
    Shape rs;
    for (char c : batch + a_only + b_only) rs.push_back(size[c]);
    acc = reshapedTo(cx, prod, rs);
    acc_l = batch + a_only + b_only;
  }
  acc = sumOut(acc, acc_l, out);
  Shape full;
  for (char c : out) full.push_back(size[c]);
  std::vector<int64_t> perm;
  for (char c : out) perm.push_back(static_cast<int64_t>(acc_l.find(c)));
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (!identity) acc = cx.emit("permute", {acc}, {{"dims", perm}});
  return expandedTo(cx, acc, full);
}

/// scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale,
/// enable_gqa), as F.scaled_dot_product_attention's documented math:
/// softmax(q k^T * scale (+ a float mask, or -inf where a bool mask is
/// false; a causal mask keeps j <= i)) v, with dropout on the weights. GQA:
/// k and v heads (dim -3) repeated to q's.
template <class Cx>
Value* sdpa(Cx& cx, Value* q, Value* k, Value* v, Value* mask, double dropout_p, bool is_causal,
            std::optional<double> scale, bool gqa = false) {
  const DType t = q->dtype();
  const int64_t r = q->type().rank();
  if (r < 2 || k->type().rank() != r || v->type().rank() != r)
    fail("scaled_dot_product_attention needs query, key and value of one rank >= 2, got " + q->type().str() + ", " +
         k->type().str() + ", " + v->type().str());
  if (gqa && r >= 3 && k->shape()[r - 3] != q->shape()[r - 3]) {
    const int64_t hq = q->shape()[r - 3], hk = k->shape()[r - 3];
    if (hk <= 0 || hq % hk) fail("enable_gqa: " + std::to_string(hq) + " query heads over " + std::to_string(hk) + " key heads");
    std::vector<int64_t> idx;
    for (int64_t h = 0; h < hq; ++h) idx.push_back(h / (hq / hk));
    Value* rep = cx.constInput(Tensor::fromInt64s({hq}, idx));
    k = cx.emit("index", {k, rep}, {{"dim", r - 3}});
    v = cx.emit("index", {v, rep}, {{"dim", r - 3}});
  }
  const int64_t L = q->shape()[r - 2], S = k->shape()[r - 2], E = q->shape()[r - 1];
  std::vector<int64_t> swap(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) swap[static_cast<size_t>(d)] = d;
  std::swap(swap[static_cast<size_t>(r - 1)], swap[static_cast<size_t>(r - 2)]);
  Value* kt = cx.emit("permute", {k}, {{"dims", swap}});
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  Value* att = cx.emit("mul", {cx.emit("matmul", {q, kt}), cx.scalar(s, t)});
  const double ninf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    Value* ones = cx.emit("full", {}, {{"shape", Shape{L, S}}, {"value", 1.0}, {"dtype", DType::Bool}});
    Value* keep = cx.emit("tril", {ones}, {{"diagonal", int64_t{0}}});
    att = cx.emit("where", {keep, att, cx.scalar(ninf, t)});
  }
  if (mask)
    att = mask->dtype() == DType::Bool ? cx.emit("where", {mask, att, cx.scalar(ninf, t)})
                                       : cx.emit("add", {att, cx.cast(mask, t)});
  att = cx.emit("softmax", {att}, {{"dim", r - 1}});
  if (dropout_p > 0) att = cx.emitNode("dropout", {att}, {{"p", dropout_p}, {"training", int64_t{1}}})->output(0);
  return cx.emit("matmul", {att, v});
}

/// rms_norm(x, normalized_shape, weight, eps) and rstd: x * rsqrt(mean(x^2)
/// over the trailing normalized dims + eps) (* weight), computed in f32 for
/// bf16/f16 input and cast back, as PyTorch's decomposition; eps unset: the
/// dtype's machine epsilon (torch.finfo).
template <class Cx>
std::pair<Value*, Value*> rmsNorm(Cx& cx, Value* x, const std::vector<int64_t>& normalized, Value* weight,
                                  std::optional<double> eps) {
  const int64_t r = x->type().rank(), n = static_cast<int64_t>(normalized.size());
  if (n == 0 || n > r) fail("rms_norm: normalized_shape has " + std::to_string(n) + " dims for " + x->type().str());
  for (int64_t i = 0; i < n; ++i)
    if (x->shape()[static_cast<size_t>(r - n + i)] != normalized[static_cast<size_t>(i)])
      fail("rms_norm: normalized_shape does not match the trailing dims of " + x->type().str());
  const DType in = x->dtype();
  if (!isFloating(in)) fail("rms_norm needs a floating input, got " + x->type().str());
  const DType t = isLowPrecisionFloat(in) ? DType::F32 : in;
  const double e = eps ? *eps
                       : in == DType::F64 ? 2.220446049250313e-16
                       : in == DType::BF16 ? 0.0078125
                       : in == DType::F16 ? 0.0009765625
                                          : 1.1920928955078125e-07;
  Value* xf = cx.cast(x, t);
  std::vector<int64_t> dims;
  for (int64_t d = r - n; d < r; ++d) dims.push_back(d);
  Value* ms = cx.emit("mean", {cx.emit("mul", {xf, xf})}, {{"dims", dims}, {"keepdim", int64_t{1}}});
  Value* rstd = cx.emit("rsqrt", {cx.emit("add", {ms, cx.scalar(e, t)})});
  Value* y = cx.emit("mul", {xf, rstd});
  if (weight) y = cx.emit("mul", {y, cx.cast(weight, t)});
  return {cx.cast(y, in), rstd};
}

}  // namespace kiln::decomp
