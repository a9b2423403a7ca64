// Op identity as a symbol: `n.is(Op::reshape)` instead of comparing names.
// Names are for the edges (import, text IR, JSON, kernel tables, messages);
// inside the compiler an op is one of the enumerators below, so a misspelt
// op is a compile error, not a comparison that is silently never true.
//
// The list is every op the op table registers (core/ops/*.cpp), sorted by
// name: OpTable::add refuses an op missing here, and a unit test checks
// that every op listed is registered. A new op is one more X(name) line.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

// clang-format off
#define KILN_OP_LIST(X) \
  X(abs) X(adam_update) X(adaptive_avg_pool2d) X(adaptive_avg_pool2d_backward) X(adaptive_max_pool2d) \
  X(adaptive_max_pool2d_backward) X(add) X(allgather) X(allreduce) X(allreduce_rows) X(amax) X(amin) X(arange) \
  X(argmax) X(argmin) X(atan2) X(attention) X(attention_backward) X(avg_pool2d) X(avg_pool2d_backward) X(batch_norm) \
  X(batch_norm_backward) X(binary_backward) X(broadcast) X(cast) X(cat) X(ceil) X(clamp) X(conv2d) \
  X(conv2d_input_backward) X(conv2d_weight_backward) X(cos) X(cross_entropy) X(cross_entropy_backward) \
  X(cumprod) X(cumsum) X(detach) X(div) X(dropout) X(elu) X(embedding) X(embedding_backward) X(embedding_backward_rows) \
  X(eq) X(erf) X(exp) X(expand) X(expm1) X(flip) X(floor) X(floor_div) X(full) X(fused_elementwise) X(fused_reduction) \
  X(gather) X(ge) X(gelu) X(gemm) X(global_norm) X(group_norm) X(group_norm_backward) X(gt) X(hardsigmoid) \
  X(hardswish) X(hardtanh) X(index) X(index_add) X(layer_norm) X(layer_norm_backward) X(le) X(leaky_relu) \
  X(linear) X(log) X(log1p) X(log_softmax) X(log_softmax_backward) X(logical_and) X(logical_not) X(logical_or) \
  X(logical_xor) X(lt) X(matmul) X(max_pool2d) X(max_pool2d_backward) X(maximum) X(mean) X(minimum) X(mish) \
  X(mse_loss) X(mul) X(ne) X(neg) X(nll_loss) X(nll_loss_backward) X(pad) X(pad_backward) X(permute) X(pow) \
  X(prod) X(prod_backward) X(reciprocal) X(reduce_scatter) X(relu) X(remainder) X(repeat) X(reshape) X(roll) \
  X(round) X(rows_to_dense) X(rsqrt) X(scatter_add) X(scatter_reduce) X(select) X(select_backward) \
  X(sgd_update) X(sgd_update_rows) X(sigmoid) X(sign) X(silu) X(sin) X(slice) X(slice_backward) X(softmax) \
  X(softmax_backward) X(softplus) X(split) X(sqrt) X(sub) X(sum) X(tanh) X(topk) X(tril) X(triu) \
  X(unary_backward) X(var) X(where) X(xlogy)
// clang-format on

namespace kiln {

enum class Op : uint16_t {
#define KILN_OP_ENUMERATOR(name) name,
  KILN_OP_LIST(KILN_OP_ENUMERATOR)
#undef KILN_OP_ENUMERATOR
};

/// How many ops the list has.
inline constexpr size_t kOpCount = 0
#define KILN_OP_COUNT(name) +1
    KILN_OP_LIST(KILN_OP_COUNT)
#undef KILN_OP_COUNT
    ;

/// The op's name, as the text IR and the op table spell it.
std::string_view opName(Op op);

/// The op called `name`, or nullopt.
std::optional<Op> opByName(std::string_view name);

}  // namespace kiln
