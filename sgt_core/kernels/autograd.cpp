// The attentions' autograd, for every device, and projected_slot_attention (the projections and
// slot_attention on any device).

#include "common.h"

namespace {

// ---------------------------------------------------------------------------------------------------
// Autograd, for every device
// ---------------------------------------------------------------------------------------------------
// Registered here rather than through torch.library.register_autograd: that wrapper imports torch._dynamo
// on its first call (1.3 s and ~70 MB in every stage process, measured on the Minesweeper train stage)
// and adds a Python round trip per call. The backward passes reach the backward operators through the
// dispatcher, so tensors on other devices get the torch implementations registered for them in Python.

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename Signature>
c10::TypedOperatorHandle<Signature> operator_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

using EdgeForward = std::tuple<Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, double, const std::optional<Tensor>&);
using EdgeBackward = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const std::optional<Tensor>&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
    const Tensor&, double, const std::optional<Tensor>&);
using SlotForward = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                               const Tensor&, const Tensor&, const Tensor&, int64_t,
                                               const std::optional<Tensor>&);
using SlotBackward = std::tuple<Tensor, Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                                const Tensor&, const Tensor&, const Tensor&,
                                                                const Tensor&, int64_t, const std::optional<Tensor>&);

// Saved features back as the optional argument (an undefined tensor where there were none).
std::optional<Tensor> optional_features(const Tensor& saved) {
  return saved.defined() ? std::optional<Tensor>(saved) : std::nullopt;
}

// Between the passes it keeps the scores and the clip mask (5 bytes per edge) besides the inputs (the edges'
// features, if any, are the caller's tensor: no copy). The features take no gradient.
struct EdgeAttention : public torch::autograd::Function<EdgeAttention> {
  static variable_list forward(AutogradContext* ctx, const Tensor& query, const Tensor& key_value,
                               const Tensor& edge_scale, const Tensor& edge_bias, const Tensor& ptr,
                               const Tensor& src, const Tensor& code, const Tensor& source_ptr,
                               const Tensor& source_edge, const Tensor& source_dst, const Tensor& source_code,
                               double temperature, double clip, const std::optional<Tensor>& features) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto forward_op = operator_handle<EdgeForward>("sgt::edge_attention");
    auto [out, scores, inside] = forward_op.call(query, key_value, edge_scale, edge_bias, ptr, src, code,
                                                 source_ptr, source_edge, source_dst, source_code, temperature,
                                                 clip, features);
    ctx->save_for_backward({query, key_value, edge_scale, scores, inside, ptr, src, code, source_ptr,
                            source_edge, source_dst, source_code, features.value_or(Tensor())});
    ctx->saved_data["temperature"] = temperature;
    ctx->mark_non_differentiable({inside});
    ctx->set_materialize_grads(false);  // no [E] zeros when the scores take no gradient
    return {out, scores, inside};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static auto backward_op = operator_handle<EdgeBackward>("sgt::edge_attention_backward");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor grad_out = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(saved[0]);
    const std::optional<Tensor> grad_scores =
        grads[1].defined() ? std::optional<Tensor>(grads[1].contiguous()) : std::nullopt;
    auto [grad_query, grad_key_value, grad_edge_scale, grad_edge_bias] = backward_op.call(
        grad_out, grad_scores, saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], saved[6], saved[7],
        saved[8], saved[9], saved[10], saved[11], ctx->saved_data["temperature"].toDouble(),
        optional_features(saved[12]));
    variable_list result(14);  // the graph, temperature, clip and features take none
    result[0] = grad_query, result[1] = grad_key_value, result[2] = grad_edge_scale, result[3] = grad_edge_bias;
    return result;
  }
};

std::tuple<Tensor, Tensor, Tensor> edge_attention_autograd(
    const Tensor& query, const Tensor& key_value, const Tensor& edge_scale, const Tensor& edge_bias,
    const Tensor& ptr, const Tensor& src, const Tensor& code, const Tensor& source_ptr, const Tensor& source_edge,
    const Tensor& source_dst, const Tensor& source_code, double temperature, double clip,
    const std::optional<Tensor>& features) {
  auto outputs = EdgeAttention::apply(query, key_value, edge_scale, edge_bias, ptr, src, code, source_ptr,
                                      source_edge, source_dst, source_code, temperature, clip, features);
  return {outputs[0], outputs[1], outputs[2]};
}

// The end of both slot operators' forward passes: keeps `saved` (the slots' features last) and the head count
// for the backward pass, which takes no gradient of the attention weights.
variable_list keep_for_slot_backward(AutogradContext* ctx, const variable_list& saved, int64_t heads,
                                     const Tensor& out, const Tensor& attention) {
  ctx->save_for_backward(saved);
  ctx->saved_data["heads"] = heads;
  ctx->mark_non_differentiable({attention});
  return {out, attention};
}

// sgt::slot_attention_backward with the head count that `keep_for_slot_backward` kept.
std::tuple<Tensor, Tensor, Tensor, Tensor> slot_gradients(AutogradContext* ctx, const Tensor& grad_out,
                                                          const Tensor& query, const Tensor& key_value,
                                                          const Tensor& edge_scale, const Tensor& neighbours,
                                                          const Tensor& code, const Tensor& attention,
                                                          const Tensor& features) {
  static auto backward_op = operator_handle<SlotBackward>("sgt::slot_attention_backward");
  return backward_op.call(grad_out.contiguous(), query, key_value, edge_scale, neighbours, code, attention,
                          ctx->saved_data["heads"].toInt(), optional_features(features));
}

// Between the passes it keeps the attention weights (H values per slot) besides the inputs.
struct SlotAttention : public torch::autograd::Function<SlotAttention> {
  static variable_list forward(AutogradContext* ctx, const Tensor& query, const Tensor& key_value,
                               const Tensor& edge_scale, const Tensor& edge_bias, const Tensor& neighbours,
                               const Tensor& code, const Tensor& mask, int64_t heads,
                               const std::optional<Tensor>& features) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto forward_op = operator_handle<SlotForward>("sgt::slot_attention");
    auto [out, attention] =
        forward_op.call(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads, features);
    return keep_for_slot_backward(
        ctx, {query, key_value, edge_scale, neighbours, code, attention, features.value_or(Tensor())}, heads, out,
        attention);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    auto [grad_query, grad_key_value, grad_edge_scale, grad_edge_bias] =
        slot_gradients(ctx, grads[0], saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], saved[6]);
    return {grad_query, grad_key_value, grad_edge_scale, grad_edge_bias, Tensor(), Tensor(), Tensor(), Tensor(),
            Tensor()};
  }
};

std::tuple<Tensor, Tensor> slot_attention_autograd(const Tensor& query, const Tensor& key_value,
                                                   const Tensor& edge_scale, const Tensor& edge_bias,
                                                   const Tensor& neighbours, const Tensor& code, const Tensor& mask,
                                                   int64_t heads, const std::optional<Tensor>& features) {
  auto outputs =
      SlotAttention::apply(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads, features);
  return {outputs[0], outputs[1]};
}

// The two projections, then slot_attention: on every device.
std::tuple<Tensor, Tensor> projected_slot_attention(const Tensor& query_x, const Tensor& key_x,
                                                    const Tensor& query_weight, const Tensor& query_bias,
                                                    const Tensor& kv_weight, const Tensor& kv_bias,
                                                    const Tensor& edge_scale, const Tensor& edge_bias,
                                                    const Tensor& neighbours, const Tensor& code, const Tensor& mask,
                                                    int64_t heads, const std::optional<Tensor>& features) {
  static auto slot_op = operator_handle<SlotForward>("sgt::slot_attention");
  return slot_op.call(at::linear(query_x, query_weight, query_bias), at::linear(key_x, kv_weight, kv_bias),
                      edge_scale, edge_bias, neighbours, code, mask, heads, features);
}

// Keeps the layer's inputs (which the caller keeps anyway) instead of the projected queries, keys and
// values (3 x 4 bytes per row and hidden unit, 15 MB of the Minesweeper preset's saved activations): the
// backward pass recomputes the two projections, two small matmuls.
struct ProjectedSlotAttention : public torch::autograd::Function<ProjectedSlotAttention> {
  static variable_list forward(AutogradContext* ctx, const Tensor& query_x, const Tensor& key_x,
                               const Tensor& query_weight, const Tensor& query_bias, const Tensor& kv_weight,
                               const Tensor& kv_bias, const Tensor& edge_scale, const Tensor& edge_bias,
                               const Tensor& neighbours, const Tensor& code, const Tensor& mask, int64_t heads,
                               const std::optional<Tensor>& features) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, attention] = projected_slot_attention(query_x, key_x, query_weight, query_bias, kv_weight, kv_bias,
                                                     edge_scale, edge_bias, neighbours, code, mask, heads, features);
    return keep_for_slot_backward(ctx,
                                  {query_x, key_x, query_weight, query_bias, kv_weight, kv_bias, edge_scale,
                                   neighbours, code, attention, features.value_or(Tensor())},
                                  heads, out, attention);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &query_x = saved[0], &key_x = saved[1], &query_weight = saved[2], &kv_weight = saved[4];
    auto [grad_query, grad_key_value, grad_edge_scale, grad_edge_bias] = slot_gradients(
        ctx, grads[0], at::linear(query_x, query_weight, saved[3]), at::linear(key_x, kv_weight, saved[5]),
        saved[6], saved[7], saved[8], saved[9], saved[10]);
    return {grad_query.mm(query_weight), grad_key_value.mm(kv_weight), grad_query.t().mm(query_x),
            grad_query.sum(0), grad_key_value.t().mm(key_x), grad_key_value.sum(0), grad_edge_scale, grad_edge_bias,
            Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

std::tuple<Tensor, Tensor> projected_slot_attention_autograd(
    const Tensor& query_x, const Tensor& key_x, const Tensor& query_weight, const Tensor& query_bias,
    const Tensor& kv_weight, const Tensor& kv_bias, const Tensor& edge_scale, const Tensor& edge_bias,
    const Tensor& neighbours, const Tensor& code, const Tensor& mask, int64_t heads,
    const std::optional<Tensor>& features) {
  auto outputs = ProjectedSlotAttention::apply(query_x, key_x, query_weight, query_bias, kv_weight, kv_bias,
                                               edge_scale, edge_bias, neighbours, code, mask, heads, features);
  return {outputs[0], outputs[1]};
}

}  // namespace

// projected_slot_attention is the projections and slot_attention on any device.
TORCH_LIBRARY_IMPL(sgt, CompositeExplicitAutograd, m) {
  m.impl("projected_slot_attention", &projected_slot_attention);
}

TORCH_LIBRARY_IMPL(sgt, Autograd, m) {
  m.impl("edge_attention", &edge_attention_autograd);
  m.impl("slot_attention", &slot_attention_autograd);
  m.impl("projected_slot_attention", &projected_slot_attention_autograd);
}
