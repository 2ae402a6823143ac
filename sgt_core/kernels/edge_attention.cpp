// The estimator's edge softmax attention over every interaction-graph edge: forward and backward CPU kernels.

#include "common.h"

namespace {

// ---------------------------------------------------------------------------------------------------
// Edge softmax attention (the estimator). For an edge e = j -> i with code c:
//   z_e = clip(((E_c * K_j) . Q_i / sqrt(d) + B_c) / tau, +-clip),  a_e = softmax over i's edges,
//   out_i = sum_e a_e V_j.
// Edges are sorted by destination: node i's edges are ptr[i] .. ptr[i+1). Sources are int32 and codes
// uint8: at Amazon2M's 200 M attention edges every byte per edge is 200 MB. Keys and values come
// interleaved, one [K_j | V_j] row per node (64 bytes at d = 8, one cache line), so each edge costs one
// random memory access in the forward pass instead of two.
// ---------------------------------------------------------------------------------------------------

// The edges grouped by source, once per graph: the k-th edge leaving source j (k in source_ptr[j] ..
// source_ptr[j+1), edges in ascending order) is edge source_edge[k], with destination source_dst[k] and
// code source_code[k]: the backward pass's sweep over sources reads destinations and codes in order, and
// gathers only each edge's two gradient terms.
std::tuple<Tensor, Tensor, Tensor, Tensor> edges_by_source(const Tensor& ptr_t, const Tensor& src_t,
                                                           const Tensor& code_t) {
  const char* op = "edges_by_source";
  const int64_t num_nodes = ptr_t.numel() - 1, num_edges = src_t.numel();
  TORCH_CHECK_VALUE(num_nodes >= 0, "sgt::", op, ": ptr must have at least one entry");
  TORCH_CHECK_VALUE(num_edges <= std::numeric_limits<int32_t>::max(), "sgt::", op, ": ", num_edges,
                    " edges do not fit the int32 edge ids");
  expect(src_t, op, "src", at::kInt, {-1});
  expect(code_t, op, "code", at::kByte, {num_edges});
  expect_offsets(ptr_t, num_nodes, num_edges, op, "ptr");
  expect_indices<int32_t>(src_t, num_nodes, op, "src");

  Tensor source_ptr_t = at::zeros({num_nodes + 1}, at::kLong);
  Tensor source_edge_t = at::empty({num_edges}, at::kInt), source_dst_t = at::empty({num_edges}, at::kInt);
  Tensor source_code_t = at::empty({num_edges}, at::kByte);
  const int64_t* ptr = ptr_t.data_ptr<int64_t>();
  const int32_t* src = src_t.data_ptr<int32_t>();
  const uint8_t* code = code_t.data_ptr<uint8_t>();
  int64_t* source_ptr = source_ptr_t.data_ptr<int64_t>();
  int32_t *source_edge = source_edge_t.data_ptr<int32_t>(), *source_dst = source_dst_t.data_ptr<int32_t>();
  uint8_t* source_code = source_code_t.data_ptr<uint8_t>();
  for (int64_t e = 0; e < num_edges; e++) source_ptr[src[e] + 1]++;
  for (int64_t j = 0; j < num_nodes; j++) source_ptr[j + 1] += source_ptr[j];
  std::vector<int64_t> next(source_ptr, source_ptr + num_nodes);
  for (int64_t i = 0; i < num_nodes; i++) {
    for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
      const int64_t k = next[src[e]]++;
      source_edge[k] = static_cast<int32_t>(e);
      source_dst[k] = static_cast<int32_t>(i);
      source_code[k] = code[e];
    }
  }
  return {source_ptr_t, source_edge_t, source_dst_t, source_code_t};
}

// The checks shared by the edge attention's forward and backward passes. Returns F, the feature columns (0:
// none); the codes index the tables' C = rows - F code rows.
int64_t expect_edge_graph(const char* op, const Tensor& query, const Tensor& key_value, const Tensor& edge_scale,
                          const Tensor& ptr, const Tensor& src, const Tensor& code,
                          const std::optional<Tensor>& features) {
  expect_float(query, op, "query");
  const auto dtype = query.scalar_type();
  TORCH_CHECK_VALUE(query.dim() == 2 && query.size(1) > 0, "sgt::", op, ": query must be [N, d] with d > 0, found ",
                    query.sizes());
  const int64_t num_nodes = query.size(0), width = query.size(1);
  expect(query, op, "query", dtype, {num_nodes, width});
  expect(key_value, op, "key_value", dtype, {num_nodes, 2 * width});
  expect(edge_scale, op, "edge_scale", dtype, {-1, width});
  expect(src, op, "src", at::kInt, {-1});
  expect(code, op, "code", at::kByte, {src.numel()});
  expect_offsets(ptr, num_nodes, src.numel(), op, "ptr");
  expect_indices<int32_t>(src, num_nodes, op, "src");
  const int64_t num_features = expect_features(op, features, {src.numel()}, dtype, edge_scale.size(0));
  expect_indices<uint8_t>(code, edge_scale.size(0) - num_features, op, "code");
  return num_features;
}

// With FEATURES, `features` [E, F] and the tables' F feature rows after the C code rows add to each edge's
// terms (`featured_row`).
template <typename scalar_t, bool FEATURES>
void edge_forward_kernel(int64_t num_nodes, int64_t d, const scalar_t* query, const scalar_t* key_value,
                         const scalar_t* edge_scale, const scalar_t* edge_bias, const int64_t* ptr,
                         const int32_t* src, const uint8_t* code, scalar_t temperature, scalar_t clip,
                         scalar_t* out, scalar_t* scores, bool* inside, const scalar_t* features, int64_t num_codes,
                         int64_t num_features) {
  const scalar_t scale = scalar_t(1) / std::sqrt(static_cast<scalar_t>(d));
  const int64_t num_edges = ptr[num_nodes];
  const scalar_t *feature_scale = edge_scale + num_codes * d, *feature_bias = edge_bias + num_codes;
  auto scratch = [&] { return std::vector<scalar_t>(FEATURES ? d : 0); };  // the edge's E terms
  parallel_dynamic_with(num_nodes, 64, scratch, [&](std::vector<scalar_t>& row, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) {
      const scalar_t* q = query + i * d;
      scalar_t* o = out + i * d;
      scalar_t total = 0;
      for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
        if (e + PREFETCH_EDGES < num_edges) {
          __builtin_prefetch(key_value + static_cast<int64_t>(src[e + PREFETCH_EDGES]) * 2 * d);
        }
        const scalar_t *k = key_value + static_cast<int64_t>(src[e]) * 2 * d, *es = edge_scale + code[e] * d;
        scalar_t bias = edge_bias[code[e]];
        if constexpr (FEATURES) {
          const scalar_t* f = features + e * num_features;
          featured_row(es, feature_scale, d, d, f, num_features, row.data());
          es = row.data();
          bias = featured_bias(bias, feature_bias, 1, f, num_features);
        }
        scalar_t raw = 0;
#pragma omp simd reduction(+ : raw)
        for (int64_t t = 0; t < d; t++) raw += q[t] * k[t] * es[t];
        scalar_t z = (raw * scale + bias) / temperature;
        inside[e] = std::fabs(z) < clip;
        z = std::fmin(std::fmax(z, -clip), clip);  // |z| <= clip <= 30: exp cannot overflow, no max needed
        const scalar_t w = std::exp(z);
        scores[e] = w;
        total += w;
      }
      for (int64_t t = 0; t < d; t++) o[t] = 0;
      const scalar_t inv_total = total > 0 ? scalar_t(1) / total : scalar_t(0);
      for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
        const scalar_t a = scores[e] * inv_total;
        const scalar_t* v = key_value + static_cast<int64_t>(src[e]) * 2 * d + d;  // the key's cache line
        scores[e] = a;
#pragma omp simd
        for (int64_t t = 0; t < d; t++) o[t] += a * v[t];
      }
    }
  });
}

std::tuple<Tensor, Tensor, Tensor> edge_attention(const Tensor& query, const Tensor& key_value,
                                                  const Tensor& edge_scale, const Tensor& edge_bias,
                                                  const Tensor& ptr, const Tensor& src, const Tensor& code,
                                                  const Tensor& source_ptr, const Tensor& source_edge,
                                                  const Tensor& source_dst, const Tensor& source_code,
                                                  double temperature, double clip,
                                                  const std::optional<Tensor>& features) {
  const char* op = "edge_attention";
  const int64_t num_features = expect_edge_graph(op, query, key_value, edge_scale, ptr, src, code, features);
  expect(edge_bias, op, "edge_bias", query.scalar_type(), {edge_scale.size(0)});
  const int64_t num_nodes = query.size(0), width = query.size(1), num_edges = src.numel();
  const int64_t num_codes = edge_scale.size(0) - num_features;
  Tensor out = at::empty_like(query), scores = at::empty({num_edges}, query.options());
  Tensor inside = at::empty({num_edges}, query.options().dtype(at::kBool));
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "edge_attention", [&] {
    auto kernel = features.has_value() ? edge_forward_kernel<scalar_t, true> : edge_forward_kernel<scalar_t, false>;
    kernel(num_nodes, width, query.data_ptr<scalar_t>(), key_value.data_ptr<scalar_t>(),
           edge_scale.data_ptr<scalar_t>(), edge_bias.data_ptr<scalar_t>(), ptr.data_ptr<int64_t>(),
           src.data_ptr<int32_t>(), code.data_ptr<uint8_t>(), static_cast<scalar_t>(temperature),
           static_cast<scalar_t>(clip), out.data_ptr<scalar_t>(), scores.data_ptr<scalar_t>(), inside.data_ptr<bool>(),
           features.has_value() ? features->data_ptr<scalar_t>() : nullptr, num_codes, num_features);
  });
  return {out, scores, inside};
}

// query_grad rows are [Q_i | dL/d out_i]; grad_scores may be null (the scores output took no gradient).
// edge_terms is scratch of 2 E values, (d loss / d raw logit, score) per edge: written in order, gathered
// (with prefetching) by the sweep over sources; gathering is cheaper than scattering, which reads each
// line before writing it. With FEATURES, each sweep forms an edge's E terms again from its features (the
// sweep over sources gathers the edge's feature row), and sweep 1 adds f_j times the code rows' gradient
// terms to the feature rows'.
template <typename scalar_t, bool FEATURES>
void edge_backward_kernel(int64_t num_nodes, int64_t d, int64_t num_codes, const scalar_t* query_grad,
                          const scalar_t* key_value, const scalar_t* edge_scale, const int64_t* ptr,
                          const int32_t* src, const uint8_t* code, const int32_t* source_edge,
                          const int64_t* source_ptr, const int32_t* source_dst, const uint8_t* source_code,
                          const scalar_t* scores, const bool* inside, scalar_t temperature,
                          const scalar_t* grad_scores, scalar_t* grad_query, scalar_t* grad_key_value,
                          scalar_t* grad_edge_scale, scalar_t* grad_edge_bias, scalar_t* edge_terms,
                          const scalar_t* features, int64_t num_features) {
  const scalar_t scale = scalar_t(1) / std::sqrt(static_cast<scalar_t>(d));
  const int64_t num_edges = ptr[num_nodes];
  const int64_t num_rows = num_codes + num_features;  // the tables' rows: codes, then features
  const scalar_t* feature_scale = edge_scale + num_codes * d;
  // an edge's E terms, then its code row's gradient terms
  auto scratch = [&] { return std::vector<scalar_t>(FEATURES ? 2 * d : 0); };

  // Sweep 1, over destinations: d loss / d logit per edge, then queries and edge-type terms (E rows, then B).
  rows_into_code_gradients(num_nodes, num_rows * (d + 1), num_rows * d, grad_edge_scale, grad_edge_bias, scratch,
                           [&](std::vector<scalar_t>& row, int64_t i, scalar_t* part_scale, scalar_t* part_bias) {
    const scalar_t *q = query_grad + i * 2 * d, *go = q + d;
    scalar_t* gq = grad_query + i * d;
    // softmax backward: expected = sum_e a_e g_e, with g_e = d loss / d a_e; g_e waits in the first
    // slot of the edge's pair
    scalar_t expected = 0;
    for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
      if (e + PREFETCH_EDGES < num_edges) {
        __builtin_prefetch(key_value + static_cast<int64_t>(src[e + PREFETCH_EDGES]) * 2 * d);
      }
      const scalar_t* v = key_value + static_cast<int64_t>(src[e]) * 2 * d + d;
      scalar_t g = grad_scores ? grad_scores[e] : scalar_t(0);
#pragma omp simd reduction(+ : g)
      for (int64_t t = 0; t < d; t++) g += go[t] * v[t];
      edge_terms[2 * e] = g;
      expected += scores[e] * g;
    }
    for (int64_t t = 0; t < d; t++) gq[t] = 0;
    for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
      scalar_t* terms = edge_terms + 2 * e;
      // gradient of the bias term B_c; the clip passes none outside (-clip, clip)
      const scalar_t g_bias = inside[e] ? scores[e] * (terms[0] - expected) / temperature : scalar_t(0);
      const scalar_t g_raw = g_bias * scale;
      terms[0] = g_raw;
      terms[1] = scores[e];
      const scalar_t *k = key_value + static_cast<int64_t>(src[e]) * 2 * d, *es = edge_scale + code[e] * d;
      scalar_t* ps = part_scale + code[e] * d;
      if constexpr (FEATURES) {
        const scalar_t* f = features + e * num_features;
        scalar_t *es_e = row.data(), *g_scale = es_e + d;
        featured_row(es, feature_scale, d, d, f, num_features, es_e);
#pragma omp simd
        for (int64_t t = 0; t < d; t++) {
          gq[t] += g_raw * k[t] * es_e[t];
          g_scale[t] = g_raw * q[t] * k[t];
          ps[t] += g_scale[t];
        }
        part_bias[code[e]] += g_bias;
        add_feature_gradients(part_scale + num_codes * d, d, d, g_scale, part_bias + num_codes, 1, g_bias, f,
                              num_features);
      } else {
#pragma omp simd
        for (int64_t t = 0; t < d; t++) {
          gq[t] += g_raw * k[t] * es[t];
          ps[t] += g_raw * q[t] * k[t];
        }
        part_bias[code[e]] += g_bias;
      }
    }
  });

  // Sweep 2, over sources: keys and values gather from the edges leaving them, whose terms are in order;
  // the one random access per edge is the destination's [Q_i | dL/d out_i] row (and its feature row).
  parallel_dynamic_with(num_nodes, 64, scratch, [&](std::vector<scalar_t>& row, int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; j++) {
      scalar_t *gk = grad_key_value + j * 2 * d, *gv = gk + d;
      for (int64_t t = 0; t < 2 * d; t++) gk[t] = 0;
      for (int64_t k = source_ptr[j]; k < source_ptr[j + 1]; k++) {
        if (k + PREFETCH_EDGES < num_edges) {
          __builtin_prefetch(query_grad + static_cast<int64_t>(source_dst[k + PREFETCH_EDGES]) * 2 * d);
          __builtin_prefetch(edge_terms + 2 * static_cast<int64_t>(source_edge[k + PREFETCH_EDGES]));
          if constexpr (FEATURES) {
            prefetch_values(features + static_cast<int64_t>(source_edge[k + PREFETCH_EDGES]) * num_features,
                            num_features);
          }
        }
        const scalar_t* terms = edge_terms + 2 * static_cast<int64_t>(source_edge[k]);
        const scalar_t g_raw = terms[0], a = terms[1];
        const scalar_t *q = query_grad + static_cast<int64_t>(source_dst[k]) * 2 * d, *go = q + d;
        const scalar_t* es = edge_scale + source_code[k] * d;
        if constexpr (FEATURES) {
          featured_row(es, feature_scale, d, d, features + static_cast<int64_t>(source_edge[k]) * num_features,
                       num_features, row.data());
          es = row.data();
        }
#pragma omp simd
        for (int64_t t = 0; t < d; t++) {
          gk[t] += g_raw * q[t] * es[t];
          gv[t] += a * go[t];
        }
      }
    }
  });
}

std::tuple<Tensor, Tensor, Tensor, Tensor> edge_attention_backward(
    const Tensor& grad_out, const std::optional<Tensor>& grad_scores, const Tensor& query, const Tensor& key_value,
    const Tensor& edge_scale, const Tensor& scores, const Tensor& inside, const Tensor& ptr, const Tensor& src,
    const Tensor& code, const Tensor& source_ptr, const Tensor& source_edge, const Tensor& source_dst,
    const Tensor& source_code, double temperature, const std::optional<Tensor>& features) {
  const char* op = "edge_attention_backward";
  const int64_t num_features = expect_edge_graph(op, query, key_value, edge_scale, ptr, src, code, features);
  const auto dtype = query.scalar_type();
  const int64_t num_nodes = query.size(0), width = query.size(1), num_edges = src.numel();
  const int64_t num_rows = edge_scale.size(0), num_codes = num_rows - num_features;
  expect(grad_out, op, "grad_out", dtype, {num_nodes, width});
  if (grad_scores.has_value()) expect(*grad_scores, op, "grad_scores", dtype, {num_edges});
  expect(scores, op, "scores", dtype, {num_edges});
  expect(inside, op, "inside", at::kBool, {num_edges});
  expect(source_edge, op, "source_edge", at::kInt, {num_edges});
  expect(source_dst, op, "source_dst", at::kInt, {num_edges});
  expect(source_code, op, "source_code", at::kByte, {num_edges});
  expect_offsets(source_ptr, num_nodes, num_edges, op, "source_ptr");
  expect_indices<int32_t>(source_edge, num_edges, op, "source_edge");
  expect_indices<int32_t>(source_dst, num_nodes, op, "source_dst");
  expect_indices<uint8_t>(source_code, num_codes, op, "source_code");

  Tensor query_grad = at::cat({query, grad_out}, 1);  // [N, 2d]: what each edge's destination gives
  Tensor grad_query = at::empty_like(query), grad_key_value = at::empty_like(key_value);
  Tensor grad_edge_scale = at::empty_like(edge_scale), grad_edge_bias = at::empty({num_rows}, query.options());
  Tensor edge_terms = at::empty({2 * num_edges}, query.options());  // scratch
  AT_DISPATCH_FLOATING_TYPES(dtype, "edge_attention_backward", [&] {
    auto kernel =
        features.has_value() ? edge_backward_kernel<scalar_t, true> : edge_backward_kernel<scalar_t, false>;
    kernel(num_nodes, width, num_codes, query_grad.data_ptr<scalar_t>(), key_value.data_ptr<scalar_t>(),
           edge_scale.data_ptr<scalar_t>(), ptr.data_ptr<int64_t>(), src.data_ptr<int32_t>(),
           code.data_ptr<uint8_t>(), source_edge.data_ptr<int32_t>(), source_ptr.data_ptr<int64_t>(),
           source_dst.data_ptr<int32_t>(), source_code.data_ptr<uint8_t>(), scores.data_ptr<scalar_t>(),
           inside.data_ptr<bool>(), static_cast<scalar_t>(temperature),
           grad_scores.has_value() ? grad_scores->data_ptr<scalar_t>() : nullptr, grad_query.data_ptr<scalar_t>(),
           grad_key_value.data_ptr<scalar_t>(), grad_edge_scale.data_ptr<scalar_t>(),
           grad_edge_bias.data_ptr<scalar_t>(), edge_terms.data_ptr<scalar_t>(),
           features.has_value() ? features->data_ptr<scalar_t>() : nullptr, num_features);
  });
  return {grad_query, grad_key_value, grad_edge_scale, grad_edge_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(sgt, CPU, m) {
  m.impl("edges_by_source", &edges_by_source);
  m.impl("edge_attention", &edge_attention);
  m.impl("edge_attention_backward", &edge_attention_backward);
}
