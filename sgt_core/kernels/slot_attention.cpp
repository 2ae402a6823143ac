// The wide network's multi-head attention over fixed sampled slots: forward and backward CPU kernels.

#include "common.h"

namespace {

// ---------------------------------------------------------------------------------------------------
// Slot attention (the wide network). Query row i attends over its `deg` slots m (key row n = nb[i, m],
// code c, mask); per head h with head width dh:
//   z = (E_c^h * K_n^h) . Q_i^h / sqrt(dh) + B_c^h,  a = softmax over i's unmasked slots (0 on masked),
//   out_i^h = sum_m a V_n^h.
// key_value rows are [K | V], 2D wide. A row with no unmasked slot gets zeros.
// ---------------------------------------------------------------------------------------------------

// Returns F, the feature columns (0: none); the codes index the tables' C = rows - F code rows.
int64_t expect_slots(const char* op, const Tensor& query, const Tensor& key_value, const Tensor& edge_scale,
                     const Tensor& neighbours, const Tensor& code, int64_t heads, const std::optional<Tensor>& features) {
  expect_float(query, op, "query");
  const auto dtype = query.scalar_type();
  TORCH_CHECK_VALUE(query.dim() == 2, "sgt::", op, ": query must be [Q, D], found ", query.sizes());
  TORCH_CHECK_VALUE(heads > 0 && query.size(1) % heads == 0, "sgt::", op, ": the width ", query.size(1),
                    " must divide into ", heads, " heads");
  TORCH_CHECK_VALUE(neighbours.dim() == 2, "sgt::", op, ": neighbours must be [Q, deg], found ",
                    neighbours.sizes());
  const int64_t num_queries = query.size(0), hidden = query.size(1), degree = neighbours.size(1);
  expect(query, op, "query", dtype, {num_queries, hidden});
  expect(key_value, op, "key_value", dtype, {-1, 2 * hidden});
  expect(edge_scale, op, "edge_scale", dtype, {-1, hidden});
  expect(neighbours, op, "neighbours", at::kLong, {num_queries, degree});
  expect(code, op, "code", at::kLong, {num_queries, degree});
  expect_indices<int64_t>(neighbours, key_value.size(0), op, "neighbours");
  const int64_t num_features = expect_features(op, features, {num_queries, degree}, dtype, edge_scale.size(0));
  expect_indices<int64_t>(code, edge_scale.size(0) - num_features, op, "code");
  return num_features;
}

// With FEATURES, `features` [Q, deg, F] and the tables' F feature rows after the C code rows add to each slot's
// terms, head by head (`featured_row`).
template <typename scalar_t, bool FEATURES>
void slot_forward_kernel(int64_t num_queries, int64_t deg, int64_t hidden, int64_t heads, const scalar_t* query,
                         const scalar_t* key_value, const scalar_t* edge_scale, const scalar_t* edge_bias,
                         const int64_t* neighbours, const int64_t* code, const bool* mask, scalar_t* out,
                         scalar_t* attention, const scalar_t* features, int64_t num_codes, int64_t num_features) {
  const int64_t dh = hidden / heads;
  const scalar_t scale = scalar_t(1) / std::sqrt(static_cast<scalar_t>(dh));
  const scalar_t *feature_scale = edge_scale + num_codes * hidden, *feature_bias = edge_bias + num_codes * heads;
  auto scratch = [&] { return std::vector<scalar_t>(FEATURES ? dh : 0); };  // a slot head's E terms
  parallel_dynamic_with(num_queries, 16, scratch, [&](std::vector<scalar_t>& row, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) {
      if (const int64_t ahead = i + PREFETCH_QUERIES; ahead < num_queries) {
        for (int64_t m = 0; m < deg; m++) {
          const int64_t slot = ahead * deg + m;
          if (mask[slot]) prefetch_values(key_value + neighbours[slot] * 2 * hidden, 2 * hidden);
        }
      }
      const scalar_t* q = query + i * hidden;
      scalar_t *a = attention + i * deg * heads, *o = out + i * hidden;
      for (int64_t h = 0; h < heads; h++) {
        scalar_t largest = -std::numeric_limits<scalar_t>::infinity();
        for (int64_t m = 0; m < deg; m++) {
          const int64_t slot = i * deg + m;
          if (!mask[slot]) continue;
          const scalar_t* k = key_value + neighbours[slot] * 2 * hidden + h * dh;
          const scalar_t* es = edge_scale + code[slot] * hidden + h * dh;
          scalar_t bias = edge_bias[code[slot] * heads + h];
          if constexpr (FEATURES) {
            const scalar_t* f = features + slot * num_features;
            featured_row(es, feature_scale + h * dh, hidden, dh, f, num_features, row.data());
            es = row.data();
            bias = featured_bias(bias, feature_bias + h, heads, f, num_features);
          }
          const scalar_t* qh = q + h * dh;
          scalar_t raw = 0;
#pragma omp simd reduction(+ : raw)
          for (int64_t t = 0; t < dh; t++) raw += qh[t] * k[t] * es[t];
          const scalar_t z = raw * scale + bias;
          a[m * heads + h] = z;
          if (z > largest) largest = z;
        }
        scalar_t total = 0;
        for (int64_t m = 0; m < deg; m++) {
          const scalar_t w = mask[i * deg + m] ? std::exp(a[m * heads + h] - largest) : scalar_t(0);
          a[m * heads + h] = w;
          total += w;
        }
        const scalar_t inv_total = total > 0 ? scalar_t(1) / total : scalar_t(0);
        scalar_t* oh = o + h * dh;
        for (int64_t t = 0; t < dh; t++) oh[t] = 0;
        for (int64_t m = 0; m < deg; m++) {
          const int64_t slot = i * deg + m;
          const scalar_t w = a[m * heads + h] * inv_total;
          a[m * heads + h] = w;
          if (w == 0) continue;
          const scalar_t* v = key_value + neighbours[slot] * 2 * hidden + hidden + h * dh;
#pragma omp simd
          for (int64_t t = 0; t < dh; t++) oh[t] += w * v[t];
        }
      }
    }
  });
}

std::tuple<Tensor, Tensor> slot_attention(const Tensor& query, const Tensor& key_value, const Tensor& edge_scale,
                                          const Tensor& edge_bias, const Tensor& neighbours, const Tensor& code,
                                          const Tensor& mask, int64_t heads, const std::optional<Tensor>& features) {
  const char* op = "slot_attention";
  const int64_t num_features = expect_slots(op, query, key_value, edge_scale, neighbours, code, heads, features);
  const int64_t num_queries = query.size(0), hidden = query.size(1), degree = neighbours.size(1);
  const int64_t num_codes = edge_scale.size(0) - num_features;
  expect(edge_bias, op, "edge_bias", query.scalar_type(), {edge_scale.size(0), heads});
  expect(mask, op, "mask", at::kBool, {num_queries, degree});
  Tensor out = at::empty_like(query), attention = at::empty({num_queries, degree, heads}, query.options());
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "slot_attention", [&] {
    auto kernel = features.has_value() ? slot_forward_kernel<scalar_t, true> : slot_forward_kernel<scalar_t, false>;
    kernel(num_queries, degree, hidden, heads, query.data_ptr<scalar_t>(), key_value.data_ptr<scalar_t>(),
           edge_scale.data_ptr<scalar_t>(), edge_bias.data_ptr<scalar_t>(), neighbours.data_ptr<int64_t>(),
           code.data_ptr<int64_t>(), mask.data_ptr<bool>(), out.data_ptr<scalar_t>(), attention.data_ptr<scalar_t>(),
           features.has_value() ? features->data_ptr<scalar_t>() : nullptr, num_codes, num_features);
  });
  return {out, attention};
}

// by_key_ptr / by_key_order group the Q * deg slots by key row; slot_grad is scratch of Q * deg * H values.
// With FEATURES, each sweep forms a slot head's E terms again from its features, and sweep 1 adds f_j times
// the code rows' gradient terms to the feature rows'.
template <typename scalar_t, bool FEATURES>
void slot_backward_kernel(int64_t num_queries, int64_t num_keys, int64_t deg, int64_t hidden, int64_t heads,
                          int64_t num_codes, const scalar_t* query, const scalar_t* key_value,
                          const scalar_t* edge_scale, const int64_t* neighbours, const int64_t* code,
                          const int64_t* by_key_ptr, const int64_t* by_key_order, const scalar_t* attention,
                          const scalar_t* grad_out, scalar_t* grad_query, scalar_t* grad_key_value,
                          scalar_t* grad_edge_scale, scalar_t* grad_edge_bias, scalar_t* slot_grad,
                          const scalar_t* features, int64_t num_features) {
  const int64_t dh = hidden / heads;
  const scalar_t scale = scalar_t(1) / std::sqrt(static_cast<scalar_t>(dh));
  const int64_t num_rows = num_codes + num_features;  // the tables' rows: codes, then features
  const scalar_t* feature_scale = edge_scale + num_codes * hidden;
  // a slot head's E terms, then its code row's gradient terms
  auto scratch = [&] { return std::vector<scalar_t>(FEATURES ? 2 * dh : 0); };

  // Sweep 1, over query rows: d loss / d logit per slot and head, then queries and edge-type terms (E rows,
  // then B rows).
  rows_into_code_gradients(num_queries, num_rows * (hidden + heads), num_rows * hidden, grad_edge_scale,
                           grad_edge_bias, scratch,
                           [&](std::vector<scalar_t>& row, int64_t i, scalar_t* part_scale, scalar_t* part_bias) {
    if (const int64_t ahead = i + PREFETCH_QUERIES; ahead < num_queries) {
      for (int64_t m = 0; m < deg; m++) {
        prefetch_values(key_value + neighbours[ahead * deg + m] * 2 * hidden, 2 * hidden);
      }
    }
    const scalar_t *q = query + i * hidden, *go = grad_out + i * hidden;
    const scalar_t* a = attention + i * deg * heads;
    scalar_t *sg = slot_grad + i * deg * heads, *gq = grad_query + i * hidden;
    for (int64_t t = 0; t < hidden; t++) gq[t] = 0;
    for (int64_t h = 0; h < heads; h++) {
      const scalar_t* goh = go + h * dh;
      scalar_t expected = 0;
      for (int64_t m = 0; m < deg; m++) {  // d loss / d weight, and the softmax's expectation
        const scalar_t* v = key_value + neighbours[i * deg + m] * 2 * hidden + hidden + h * dh;
        scalar_t g = 0;
#pragma omp simd reduction(+ : g)
        for (int64_t t = 0; t < dh; t++) g += goh[t] * v[t];
        sg[m * heads + h] = g;
        expected += a[m * heads + h] * g;
      }
      for (int64_t m = 0; m < deg; m++) {
        const int64_t slot = i * deg + m;
        const scalar_t w = a[m * heads + h];
        const scalar_t g_logit = w * (sg[m * heads + h] - expected);  // masked slots: w = 0
        const scalar_t g_raw = g_logit * scale;
        sg[m * heads + h] = g_raw;
        if (w == 0) continue;
        const scalar_t* k = key_value + neighbours[slot] * 2 * hidden + h * dh;
        const scalar_t* es = edge_scale + code[slot] * hidden + h * dh;
        const scalar_t* qh = q + h * dh;
        scalar_t *gqh = gq + h * dh, *ps = part_scale + code[slot] * hidden + h * dh;
        if constexpr (FEATURES) {
          const scalar_t* f = features + slot * num_features;
          scalar_t *es_slot = row.data(), *g_scale = es_slot + dh;
          featured_row(es, feature_scale + h * dh, hidden, dh, f, num_features, es_slot);
#pragma omp simd
          for (int64_t t = 0; t < dh; t++) {
            gqh[t] += g_raw * k[t] * es_slot[t];
            g_scale[t] = g_raw * qh[t] * k[t];
            ps[t] += g_scale[t];
          }
          part_bias[code[slot] * heads + h] += g_logit;
          add_feature_gradients(part_scale + num_codes * hidden + h * dh, hidden, dh, g_scale,
                                part_bias + num_codes * heads + h, heads, g_logit, f, num_features);
        } else {
#pragma omp simd
          for (int64_t t = 0; t < dh; t++) {
            gqh[t] += g_raw * k[t] * es[t];
            ps[t] += g_raw * qh[t] * k[t];
          }
          part_bias[code[slot] * heads + h] += g_logit;
        }
      }
    }
  });

  // Sweep 2, over key rows: keys and values gather from the slots that point at them.
  const int64_t total_slots = num_queries * deg;
  parallel_dynamic_with(num_keys, 64, scratch, [&](std::vector<scalar_t>& row, int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; j++) {
      scalar_t *gk = grad_key_value + j * 2 * hidden, *gv = gk + hidden;
      for (int64_t t = 0; t < 2 * hidden; t++) gk[t] = 0;
      for (int64_t idx = by_key_ptr[j]; idx < by_key_ptr[j + 1]; idx++) {
        if (idx + PREFETCH_SLOTS < total_slots) {
          const int64_t later = by_key_order[idx + PREFETCH_SLOTS], row_ahead = later / deg;
          prefetch_values(query + row_ahead * hidden, hidden);
          prefetch_values(grad_out + row_ahead * hidden, hidden);
          prefetch_values(attention + later * heads, heads);
          prefetch_values(slot_grad + later * heads, heads);
          if constexpr (FEATURES) prefetch_values(features + later * num_features, num_features);
        }
        const int64_t slot = by_key_order[idx], i = slot / deg;
        const scalar_t *q = query + i * hidden, *go = grad_out + i * hidden;
        const scalar_t* es = edge_scale + code[slot] * hidden;
        for (int64_t h = 0; h < heads; h++) {
          const scalar_t w = attention[slot * heads + h], g_raw = slot_grad[slot * heads + h];
          if (w == 0 && g_raw == 0) continue;
          if constexpr (FEATURES) {
            const scalar_t* es_slot = row.data();
            featured_row(es + h * dh, feature_scale + h * dh, hidden, dh, features + slot * num_features,
                         num_features, row.data());
            const scalar_t *qh = q + h * dh, *goh = go + h * dh;
            scalar_t *gkh = gk + h * dh, *gvh = gv + h * dh;
#pragma omp simd
            for (int64_t t = 0; t < dh; t++) {
              gkh[t] += g_raw * qh[t] * es_slot[t];
              gvh[t] += w * goh[t];
            }
          } else {
#pragma omp simd
            for (int64_t t = h * dh; t < (h + 1) * dh; t++) {
              gk[t] += g_raw * q[t] * es[t];
              gv[t] += w * go[t];
            }
          }
        }
      }
    }
  });
}

std::tuple<Tensor, Tensor, Tensor, Tensor> slot_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                                   const Tensor& key_value, const Tensor& edge_scale,
                                                                   const Tensor& neighbours, const Tensor& code,
                                                                   const Tensor& attention, int64_t heads,
                                                                   const std::optional<Tensor>& features) {
  const char* op = "slot_attention_backward";
  const int64_t num_features = expect_slots(op, query, key_value, edge_scale, neighbours, code, heads, features);
  const int64_t num_queries = query.size(0), hidden = query.size(1), degree = neighbours.size(1);
  const int64_t num_keys = key_value.size(0), num_rows = edge_scale.size(0), num_codes = num_rows - num_features;
  expect(grad_out, op, "grad_out", query.scalar_type(), {num_queries, hidden});
  expect(attention, op, "attention", query.scalar_type(), {num_queries, degree, heads});
  // the slots grouped by key row, afresh per call: the sample changes every epoch (O(slots))
  auto [by_key_ptr, by_key_order] = group_by(neighbours.data_ptr<int64_t>(), neighbours.numel(), num_keys);
  Tensor grad_query = at::empty_like(query), grad_key_value = at::empty_like(key_value);
  Tensor grad_edge_scale = at::empty_like(edge_scale), grad_edge_bias = at::empty({num_rows, heads}, query.options());
  Tensor slot_grad = at::empty_like(attention);  // scratch: d loss / d logit per slot and head
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "slot_attention_backward", [&] {
    auto kernel =
        features.has_value() ? slot_backward_kernel<scalar_t, true> : slot_backward_kernel<scalar_t, false>;
    kernel(num_queries, num_keys, degree, hidden, heads, num_codes, query.data_ptr<scalar_t>(),
           key_value.data_ptr<scalar_t>(), edge_scale.data_ptr<scalar_t>(), neighbours.data_ptr<int64_t>(),
           code.data_ptr<int64_t>(), by_key_ptr.data_ptr<int64_t>(), by_key_order.data_ptr<int64_t>(),
           attention.data_ptr<scalar_t>(), grad_out.data_ptr<scalar_t>(), grad_query.data_ptr<scalar_t>(),
           grad_key_value.data_ptr<scalar_t>(), grad_edge_scale.data_ptr<scalar_t>(),
           grad_edge_bias.data_ptr<scalar_t>(), slot_grad.data_ptr<scalar_t>(),
           features.has_value() ? features->data_ptr<scalar_t>() : nullptr, num_features);
  });
  return {grad_query, grad_key_value, grad_edge_scale, grad_edge_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(sgt, CPU, m) {
  m.impl("slot_attention", &slot_attention);
  m.impl("slot_attention_backward", &slot_attention_backward);
}
