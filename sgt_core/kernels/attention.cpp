// CPU kernels of the `sgt` torch operators: the estimator's edge softmax attention over every
// interaction-graph edge, the wide network's multi-head attention over fixed sampled slots, reservoir
// sampling, dropout masks, and the steps of the local branch's top-k propagation rows.
//
// The operator schemas are the `m.def` lines of TORCH_LIBRARY below; sgt_core/kernels/library.py builds
// this file with torch.utils.cpp_extension and, where it cannot be built, defines the same schemas from
// these lines so that the torch implementations (sgt_core/models/fused_{edge,slot}_attention.py, also
// the CUDA path) answer the same operator names. Autograd is registered below (and there, for the
// operators defined without this file).
//
// Each forward pass makes one sweep over the destinations (query rows) with every per-edge value in
// registers, so nothing of size E x d is ever materialised; that holds for continuous edge features too,
// whose per-edge terms the kernels form from the [E, F] features (see "Continuous edge features" below). Each backward pass makes two sweeps: one over
// the destinations (gradients of queries, edge-type terms and a per-edge scalar), and one over the sources
// grouped by a counting sort (gradients of keys and values). The second sweep replaces a scatter, which
// would need atomics or one gradient buffer per thread.
//
// Results do not depend on the number of threads or their scheduling: every output row is computed by one
// thread in a fixed order, and the small [C, d] edge-type gradients are summed per fixed block of rows,
// then over the blocks in order. Threads come from at::parallel_for, so torch.set_num_threads governs them.
//
// Every operator checks devices, dtypes, shapes, contiguity and index bounds before it touches memory:
// a wrong tensor raises ValueError, an index outside its table IndexError, both naming the argument.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using at::Tensor;

// Rows per block of the edge-type gradient partial sums.
constexpr int64_t ROWS_PER_BLOCK = 256;
// How many edges ahead the edge kernels prefetch the node row they will gather. Their gathers are random
// (expander edges have no locality), so past the CPU caches (about 10^6 nodes) each one is a trip to
// memory; asking for it this far ahead overlaps the trips instead of taking them one after another.
constexpr int64_t PREFETCH_EDGES = 32;
// The slot kernels' counterparts: the forward pass and the backward pass's sweep over queries ask for the
// [K | V] rows of the query PREFETCH_QUERIES rows ahead (deg rows of 2 * hidden values, several cache lines
// each); the sweep over keys asks for the query and gradient rows of the slot PREFETCH_SLOTS ahead.
constexpr int64_t PREFETCH_QUERIES = 2;
constexpr int64_t PREFETCH_SLOTS = 8;
constexpr int64_t CACHE_LINE_BYTES = 64;

// Asks for `count` values from `row` on, a cache line at a time: a prefetch brings one line, and a wide
// network's row spans several.
template <typename scalar_t>
inline void prefetch_values(const scalar_t* row, int64_t count) {
  const char* first = reinterpret_cast<const char*>(row);
  const int64_t bytes = count * static_cast<int64_t>(sizeof(scalar_t));
  for (int64_t offset = 0; offset < bytes; offset += CACHE_LINE_BYTES) __builtin_prefetch(first + offset);
}

// ---------------------------------------------------------------------------------------------------
// Argument checks
// ---------------------------------------------------------------------------------------------------

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t k = 0; k < shape.size(); k++) {
    text += (k ? ", " : "") + (shape[k] < 0 ? std::string("*") : std::to_string(shape[k]));
  }
  return text + "]";
}

// "torch.int32" for at::kInt: the name a Python caller knows.
std::string dtype_name(at::ScalarType dtype) { return "torch." + std::string(c10::getDtypeNames(dtype).first); }

// A CPU tensor of `dtype`, contiguous, of `shape` (-1: any size). ValueError naming `name` otherwise.
void expect(const Tensor& t, const char* op, const char* name, at::ScalarType dtype,
            const std::vector<int64_t>& shape) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), "sgt::", op, ": ", name, " must be a CPU tensor, found one on ",
                    t.device());
  TORCH_CHECK_VALUE(t.scalar_type() == dtype, "sgt::", op, ": ", name, " must be ", dtype_name(dtype),
                    ", found ", dtype_name(t.scalar_type()));
  bool same = t.dim() == static_cast<int64_t>(shape.size());
  for (int64_t k = 0; same && k < t.dim(); k++) same = shape[k] < 0 || t.size(k) == shape[k];
  TORCH_CHECK_VALUE(same, "sgt::", op, ": ", name, " must have shape ", shape_text(shape), ", found ",
                    t.sizes());
  TORCH_CHECK_VALUE(t.is_contiguous(), "sgt::", op, ": ", name, " must be contiguous");
}

// Every value of an integer tensor lies in [0, bound); IndexError naming the first one outside otherwise.
// Each call of an operator checks its indices again, so the test is one unsigned comparison per value
// (a negative value, as unsigned, is past any bound), OR-ed without a branch so that it vectorises: about
// a millisecond per 10^7 values on one thread. One thread, because a parallel region per argument costs
// more in synchronisation than it saves, and much more when other processes hold the cores.
template <typename index_t>
void expect_indices(const Tensor& t, int64_t bound, const char* op, const char* name) {
  using unsigned_t = std::make_unsigned_t<index_t>;
  uint64_t limit = static_cast<uint64_t>(std::max<int64_t>(bound, 0));
  if (limit > static_cast<uint64_t>(std::numeric_limits<index_t>::max())) {
    if (std::is_unsigned_v<index_t>) return;  // every value fits (uint8 codes of a table of 256 rows)
    limit = static_cast<uint64_t>(std::numeric_limits<index_t>::max()) + 1;  // only negatives can fail
  }
  const unsigned_t below = static_cast<unsigned_t>(limit);
  const index_t* values = t.data_ptr<index_t>();
  const int64_t count = t.numel();
  // In parallel: the wide network's slots are checked on every call (~1% of a Minesweeper epoch serially).
  std::atomic<bool> bad{false};
  at::parallel_for(0, count, 1 << 16, [&](int64_t begin, int64_t end) {
    unsigned_t outside = 0;
    for (int64_t k = begin; k < end; k++) outside |= static_cast<unsigned_t>(static_cast<unsigned_t>(values[k]) >= below);
    if (outside) bad = true;
  });
  if (!bad) return;
  for (int64_t k = 0; k < count; k++) {
    const int64_t v = static_cast<int64_t>(values[k]);
    TORCH_CHECK_INDEX(0 <= v && v < bound, "sgt::", op, ": ", name, "[", k, "] = ", v, " is outside [0, ",
                      bound, ")");
  }
}

// CSR offsets: int64 [n + 1], rising from 0 to `total`.
void expect_offsets(const Tensor& ptr, int64_t n, int64_t total, const char* op, const char* name) {
  expect(ptr, op, name, at::kLong, {n + 1});
  const int64_t* p = ptr.data_ptr<int64_t>();
  bool rising = p[0] == 0 && p[n] == total;
  for (int64_t k = 0; rising && k < n; k++) rising = p[k] <= p[k + 1];
  TORCH_CHECK_VALUE(rising, "sgt::", op, ": ", name, " must rise from 0 to ", total, ", found ", p[0],
                    " .. ", p[n], rising ? "" : " (or falling somewhere)");
}

void expect_float(const Tensor& t, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, "sgt::", op, ": ", name,
                    " must be torch.float32 or torch.float64, found ", dtype_name(t.scalar_type()));
}

// ---------------------------------------------------------------------------------------------------
// Parallel loops
// ---------------------------------------------------------------------------------------------------

// f(begin, end) over [0, count) in chunks of `chunk` handed out as threads free up, like OpenMP's
// schedule(dynamic): nodes' degrees vary (hubs, virtual nodes), and at::parallel_for alone splits a range
// into one static part per thread. The threads are at::parallel_for's, so torch's thread setting holds.
// `parallel_dynamic_with` gives each worker a `make()` state, scratch that all its chunks reuse: f(state,
// begin, end).
template <typename Make, typename F>
void parallel_dynamic_with(int64_t count, int64_t chunk, const Make& make, const F& f) {
  const int64_t chunks = (count + chunk - 1) / chunk;
  if (chunks == 0) return;
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), chunks);
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    auto state = make();
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      f(state, c * chunk, std::min(count, (c + 1) * chunk));
    }
  });
}

template <typename F>
void parallel_dynamic(int64_t count, int64_t chunk, const F& f) {
  parallel_dynamic_with(count, chunk, [] { return 0; }, [&](int, int64_t begin, int64_t end) { f(begin, end); });
}

// Sums `blocks` partial tables of `size` values into `total`, block by block in order.
template <typename scalar_t>
void sum_blocks(const scalar_t* partial, int64_t blocks, int64_t size, scalar_t* total) {
  at::parallel_for(0, size, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; k++) {
      scalar_t sum = 0;
      for (int64_t b = 0; b < blocks; b++) sum += partial[b * size + k];
      total[k] = sum;
    }
  });
}

// Sweep 1 of a backward pass: row(state, i, part_scale, part_bias) for every row i in [0, rows), where each
// block of ROWS_PER_BLOCK rows adds its edge-type gradient terms into a zeroed partial table of its own (`table`
// values: `scale_size` of E, then B's); then the blocks' tables are summed in order into grad_edge_scale and
// grad_edge_bias, so that the sums do not depend on the threads. `state` is the worker's `make()` scratch.
template <typename scalar_t, typename Make, typename Row>
void rows_into_code_gradients(int64_t rows, int64_t table, int64_t scale_size, scalar_t* grad_edge_scale,
                              scalar_t* grad_edge_bias, const Make& make, const Row& row) {
  const int64_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  Tensor partial_t = at::zeros({std::max<int64_t>(blocks, 1), table}, c10::CppTypeToScalarType<scalar_t>::value);
  scalar_t* partial = partial_t.data_ptr<scalar_t>();
  parallel_dynamic_with(blocks, 1, make, [&](auto& state, int64_t block_begin, int64_t block_end) {
    for (int64_t b = block_begin; b < block_end; b++) {
      scalar_t *part_scale = partial + b * table, *part_bias = part_scale + scale_size;
      const int64_t end = std::min((b + 1) * ROWS_PER_BLOCK, rows);
      for (int64_t i = b * ROWS_PER_BLOCK; i < end; i++) row(state, i, part_scale, part_bias);
    }
  });
  std::vector<scalar_t> totals(table);
  sum_blocks(partial, blocks, table, totals.data());
  std::copy(totals.begin(), totals.begin() + scale_size, grad_edge_scale);
  std::copy(totals.begin() + scale_size, totals.end(), grad_edge_bias);
}

// ---------------------------------------------------------------------------------------------------
// Continuous edge features (Spexphormer's E = W_E f and B = W_B f of an edge's feature vector f, section 3).
// Both attentions' operators take them as an optional [E, F] (edges) or [Q, deg, F] (slots) tensor, and their
// E and B tables then end with F feature rows after the C code rows: the columns of W_E and W_B. An edge of
// code c and features f has the terms
//   E_c + sum_j f_j E_{C+j}   and   B_c + sum_j f_j B_{C+j},
// formed per edge in a few registers of scratch: a tensor of per-edge terms would be 4 d bytes per edge and
// layer. A categorical code is a one-hot feature, so this is one linear map of [one-hot code | f]. Zero
// features add nothing and are skipped: the attention edges the input graph lacks (self-loops, expander
// edges) have none. Without the features tensor the kernels run their code-only instantiation (FEATURES =
// false), the very arithmetic they had before features existed.
// ---------------------------------------------------------------------------------------------------

// row[0, width) = code_row + sum_j f_j feature_rows[j * stride ...]: an edge's (or a slot head's) E terms.
// WIDTH > 0 fixes the width at compile time (4, or blocks of 8): the sum then runs in registers. Summed
// into `row` itself, each feature's adds would wait on the previous feature's stores (row may alias the
// tables, so the compiler keeps it in memory), several times the arithmetic's cost per edge.
template <int WIDTH, typename scalar_t>
inline void featured_row_of(const scalar_t* code_row, const scalar_t* feature_rows, int64_t stride,
                            int64_t runtime_width, const scalar_t* f, int64_t num_features, scalar_t* row) {
  if constexpr (WIDTH > 0) {
    scalar_t sum[WIDTH];
    for (int64_t t = 0; t < WIDTH; t++) sum[t] = code_row[t];
    for (int64_t j = 0; j < num_features; j++) {
      const scalar_t fj = f[j];
      if (fj == 0) continue;
      const scalar_t* w = feature_rows + j * stride;
      for (int64_t t = 0; t < WIDTH; t++) sum[t] += fj * w[t];
    }
    for (int64_t t = 0; t < WIDTH; t++) row[t] = sum[t];
  } else {
    for (int64_t t = 0; t < runtime_width; t++) row[t] = code_row[t];
    for (int64_t j = 0; j < num_features; j++) {
      const scalar_t fj = f[j];
      if (fj == 0) continue;
      const scalar_t* w = feature_rows + j * stride;
#pragma omp simd
      for (int64_t t = 0; t < runtime_width; t++) row[t] += fj * w[t];
    }
  }
}

// Any width, in blocks of 8 columns (each column's sum is the same whatever the blocks).
template <typename scalar_t>
inline void featured_row(const scalar_t* code_row, const scalar_t* feature_rows, int64_t stride, int64_t width,
                         const scalar_t* f, int64_t num_features, scalar_t* row) {
  if (width == 4) return featured_row_of<4>(code_row, feature_rows, stride, width, f, num_features, row);
  int64_t t = 0;
  for (; t + 8 <= width; t += 8) {
    featured_row_of<8>(code_row + t, feature_rows + t, stride, 8, f, num_features, row + t);
  }
  if (t < width) featured_row_of<0>(code_row + t, feature_rows + t, stride, width - t, f, num_features, row + t);
}

// bias + sum_j f_j feature_biases[j * stride]: an edge's (or a slot head's) B term.
template <typename scalar_t>
inline scalar_t featured_bias(scalar_t bias, const scalar_t* feature_biases, int64_t stride, const scalar_t* f,
                              int64_t num_features) {
  for (int64_t j = 0; j < num_features; j++) {
    if (f[j] != 0) bias += f[j] * feature_biases[j * stride];
  }
  return bias;
}

// The feature rows' share of an edge's gradient: f_j times its code row's terms (g_scale, `width` values of E;
// g_bias of B), added into the partial tables' feature rows.
template <int WIDTH, typename scalar_t>
inline void add_feature_gradients_of(scalar_t* part_rows, int64_t stride, int64_t runtime_width,
                                     const scalar_t* g_scale, scalar_t* part_biases, int64_t bias_stride,
                                     scalar_t g_bias, const scalar_t* f, int64_t num_features) {
  const int64_t width = WIDTH > 0 ? WIDTH : runtime_width;
  for (int64_t j = 0; j < num_features; j++) {
    const scalar_t fj = f[j];
    if (fj == 0) continue;
    scalar_t* p = part_rows + j * stride;
#pragma omp simd
    for (int64_t t = 0; t < width; t++) p[t] += fj * g_scale[t];
    part_biases[j * bias_stride] += fj * g_bias;
  }
}

template <typename scalar_t>
inline void add_feature_gradients(scalar_t* part_rows, int64_t stride, int64_t width, const scalar_t* g_scale,
                                  scalar_t* part_biases, int64_t bias_stride, scalar_t g_bias, const scalar_t* f,
                                  int64_t num_features) {
  if (width == 8) {
    return add_feature_gradients_of<8>(part_rows, stride, width, g_scale, part_biases, bias_stride, g_bias, f,
                                       num_features);
  }
  if (width == 4) {
    return add_feature_gradients_of<4>(part_rows, stride, width, g_scale, part_biases, bias_stride, g_bias, f,
                                       num_features);
  }
  add_feature_gradients_of<0>(part_rows, stride, width, g_scale, part_biases, bias_stride, g_bias, f, num_features);
}

// Checks the optional features: the query's dtype, `shape` then F columns, at most as many as the tables' rows
// (which end with F feature rows). Returns F, 0 without features.
int64_t expect_features(const char* op, const std::optional<Tensor>& features, std::vector<int64_t> shape,
                        at::ScalarType dtype, int64_t table_rows) {
  if (!features.has_value()) return 0;
  shape.push_back(-1);
  expect(*features, op, "features", dtype, shape);
  const int64_t num_features = features->size(static_cast<int64_t>(shape.size()) - 1);
  TORCH_CHECK_VALUE(num_features <= table_rows, "sgt::", op, ": edge_scale must end with one row per feature ",
                    "column: ", num_features, " columns but ", table_rows, " rows");
  return num_features;
}

// Counting sort: groups `count` items by key in [0, n). Items with key k are order[ptr[k] .. ptr[k+1]),
// in ascending item order. The caller has checked the keys.
std::tuple<Tensor, Tensor> group_by(const int64_t* key, int64_t count, int64_t n) {
  Tensor ptr_t = at::zeros({n + 1}, at::kLong), order_t = at::empty({count}, at::kLong);
  int64_t *ptr = ptr_t.data_ptr<int64_t>(), *order = order_t.data_ptr<int64_t>();
  for (int64_t item = 0; item < count; item++) ptr[key[item] + 1]++;
  for (int64_t k = 0; k < n; k++) ptr[k + 1] += ptr[k];
  std::vector<int64_t> next(ptr, ptr + n);
  for (int64_t item = 0; item < count; item++) order[next[key[item]]++] = item;
  return {ptr_t, order_t};
}

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

// ---------------------------------------------------------------------------------------------------
// Randomness: a counter-based generator. Draw number `counter` of a call seeded with `seed` is the
// SplitMix64 finaliser of seed + golden-ratio * (counter + 1): independent of threads and order, so a
// seed gives the same sample on any number of cores. The seed of each call comes from the caller's
// torch.Generator, so runs stay reproducible from the configured seed.
// ---------------------------------------------------------------------------------------------------

inline uint64_t mix64(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1), 53 random bits.
inline double uniform01(uint64_t seed, uint64_t counter) {
  return (static_cast<double>(mix64(seed, counter) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Sampling methods, as in sgt_core/sampling/reservoir.py.
constexpr int64_t SAMPLE_RESERVOIR = 0, SAMPLE_UNIFORM = 1, SAMPLE_TOPK = 2;

// Draws `degree` incoming edges per node without replacement (Efraimidis-Spirakis reservoir keys
// log(u) / a, the largest `degree` win), or uniformly, or the highest-scored (ties at random). Nodes with
// at most `degree` candidates keep all of them; unused slots get -1. The uniform draw of edge e is counter
// e, so a node's sample does not depend on which other nodes are sampled with it. Returns [Q, degree].
Tensor sample_neighbours(const Tensor& ptr_t, const Tensor& scores_t, const std::optional<Tensor>& nodes_t,
                         int64_t degree, int64_t method, int64_t seed_value) {
  const char* op = "sample_neighbours";
  TORCH_CHECK_VALUE(degree >= 0, "sgt::", op, ": degree must be >= 0, found ", degree);
  TORCH_CHECK_VALUE(SAMPLE_RESERVOIR <= method && method <= SAMPLE_TOPK, "sgt::", op,
                    ": method must be 0 (reservoir), 1 (uniform) or 2 (topk), found ", method);
  expect(scores_t, op, "scores", at::kFloat, {-1});
  TORCH_CHECK_VALUE(ptr_t.dim() == 1 && ptr_t.numel() > 0, "sgt::", op, ": ptr must be [N + 1], found ",
                    ptr_t.sizes());
  const int64_t num_nodes = ptr_t.numel() - 1;
  expect(ptr_t, op, "ptr", at::kLong, {num_nodes + 1});
  const int64_t* ptr = ptr_t.data_ptr<int64_t>();
  bool rising = ptr[0] == 0 && ptr[num_nodes] <= scores_t.numel();
  for (int64_t k = 0; rising && k < num_nodes; k++) rising = ptr[k] <= ptr[k + 1];
  TORCH_CHECK_VALUE(rising, "sgt::", op, ": ptr must rise from 0 to at most the ", scores_t.numel(),
                    " scores, found ", ptr[0], " .. ", ptr[num_nodes]);
  const int64_t* nodes = nullptr;
  int64_t num_queries = num_nodes;
  if (nodes_t.has_value()) {
    expect(*nodes_t, op, "nodes", at::kLong, {-1});
    expect_indices<int64_t>(*nodes_t, num_nodes, op, "nodes");
    nodes = nodes_t->data_ptr<int64_t>();
    num_queries = nodes_t->numel();
  }
  const float* scores = scores_t.data_ptr<float>();
  const uint64_t seed = static_cast<uint64_t>(seed_value);
  Tensor edges_t = at::empty({num_queries, degree}, at::kLong);
  int64_t* edges = edges_t.data_ptr<int64_t>();
  parallel_dynamic(num_queries, 64, [&](int64_t begin, int64_t end) {
    std::vector<double> best_key(std::max<int64_t>(degree, 1));
    for (int64_t q = begin; q < end; q++) {
      const int64_t node = nodes ? nodes[q] : q, start = ptr[node], count = ptr[node + 1] - start;
      int64_t* out = edges + q * degree;
      if (count <= degree) {
        for (int64_t m = 0; m < degree; m++) out[m] = m < count ? start + m : -1;
        continue;
      }
      // keep the `degree` largest keys, sorted descending, by insertion
      int64_t kept = 0;
      for (int64_t e = start; e < start + count; e++) {
        const double u = uniform01(seed, static_cast<uint64_t>(e));
        double key;
        if (method == SAMPLE_UNIFORM) {
          key = u;
        } else if (method == SAMPLE_TOPK) {
          key = static_cast<double>(scores[e]) + u * 1e-12;
        } else {  // zero weight: drawn last
          key = scores[e] > 0.0f ? std::log(u) / static_cast<double>(scores[e])
                                 : -std::numeric_limits<double>::infinity();
        }
        if (kept == degree && !(key > best_key[kept - 1])) continue;
        int64_t m = kept < degree ? kept++ : degree - 1;
        while (m > 0 && best_key[m - 1] < key) {
          best_key[m] = best_key[m - 1];
          out[m] = out[m - 1];
          m--;
        }
        best_key[m] = key;
        out[m] = e;
      }
    }
  });
  return edges_t;
}

// One step of the top-k propagation rows' recursion (sgt_core/sampling/propagation.py): row i of
// step @ op + teleport * e_i, cut to its `keep` largest entries, ties to the lower column. `step` is [N, N]
// CSR (int64 offsets, int32 columns, float32 values); `op` is in this operator's own output layout, fixed
// width: row j's entries are the first op_counts[j] of op_cols[j] and op_vals[j] ([N, W]), so each step
// reads the last one's output as it is, with no packing in between.
// Row i sums its products in the order SciPy's sparse product does (step's entries, then op's row), in
// float32, and adds the teleport after them, so the result equals the SciPy path's bit for bit. Each thread
// keeps a dense [N] accumulator and the list of columns it touched: O(products) per row, no hashing, no
// [rows, N] matrix. Returns (counts [N], columns [N, keep] int32, values [N, keep] float32); a row's entries
// are its first counts[i] slots, in no particular order, and its other slots hold (i, 0).
std::tuple<Tensor, Tensor, Tensor> propagation_step(const Tensor& step_ptr_t, const Tensor& step_cols_t,
                                                    const Tensor& step_vals_t, const Tensor& op_counts_t,
                                                    const Tensor& op_cols_t, const Tensor& op_vals_t,
                                                    double teleport, int64_t keep) {
  const char* op = "propagation_step";
  TORCH_CHECK_VALUE(keep >= 1, "sgt::", op, ": keep must be >= 1, found ", keep);
  TORCH_CHECK_VALUE(step_ptr_t.dim() == 1 && step_ptr_t.numel() > 0, "sgt::", op, ": step_ptr must be [N + 1]");
  const int64_t rows = step_ptr_t.numel() - 1, n = rows;
  TORCH_CHECK_VALUE(op_cols_t.dim() == 2 && op_cols_t.size(0) == n, "sgt::", op, ": op_cols must be [", n,
                    ", W], found ", op_cols_t.sizes());
  const int64_t width = op_cols_t.size(1);
  expect(step_cols_t, op, "step_cols", at::kInt, {-1});
  expect(step_vals_t, op, "step_vals", at::kFloat, {step_cols_t.numel()});
  expect_offsets(step_ptr_t, rows, step_cols_t.numel(), op, "step_ptr");
  expect_indices<int32_t>(step_cols_t, n, op, "step_cols");
  expect(op_counts_t, op, "op_counts", at::kLong, {n});
  expect(op_cols_t, op, "op_cols", at::kInt, {n, width});
  expect(op_vals_t, op, "op_vals", at::kFloat, {n, width});
  expect_indices<int64_t>(op_counts_t, width + 1, op, "op_counts");
  const int64_t *step_ptr = step_ptr_t.data_ptr<int64_t>(), *op_counts = op_counts_t.data_ptr<int64_t>();
  const int32_t *step_cols = step_cols_t.data_ptr<int32_t>(), *op_cols = op_cols_t.data_ptr<int32_t>();
  const float *step_vals = step_vals_t.data_ptr<float>(), *op_vals = op_vals_t.data_ptr<float>();
  // the used slots only: padding may hold anything
  for (int64_t j = 0; j < n; j++) {
    for (int64_t b = j * width; b < j * width + op_counts[j]; b++) {
      TORCH_CHECK_INDEX(0 <= op_cols[b] && op_cols[b] < n, "sgt::", op, ": op_cols holds ", op_cols[b],
                        " in row ", j, ", outside [0, ", n, ")");
    }
  }
  const float own_value = static_cast<float>(teleport);
  Tensor counts_t = at::empty({rows}, at::kLong);
  Tensor columns_t = at::empty({rows, keep}, at::kInt);
  Tensor values_t = at::empty({rows, keep}, at::kFloat);
  int64_t* counts = counts_t.data_ptr<int64_t>();
  int32_t* columns = columns_t.data_ptr<int32_t>();
  float* values = values_t.data_ptr<float>();
  // one [N] accumulator per worker, with the columns it touched, reused by all of the worker's rows
  struct Accumulator {
    std::vector<float> sums;
    std::vector<uint8_t> seen;
    std::vector<int32_t> touched;
    void add(int32_t column, float value) {
      if (!seen[column]) {
        seen[column] = 1;
        touched.push_back(column);
      }
      sums[column] += value;
    }
  };
  const auto make = [n] { return Accumulator{std::vector<float>(n, 0.0f), std::vector<uint8_t>(n, 0), {}}; };
  parallel_dynamic_with(rows, 256, make, [&](Accumulator& row_sums, int64_t begin, int64_t end) {
    std::vector<int32_t>& touched = row_sums.touched;
    const std::vector<float>& sums = row_sums.sums;
    const auto larger = [&sums](int32_t x, int32_t y) {  // by value, ties to the lower column
      return sums[x] > sums[y] || (sums[x] == sums[y] && x < y);
    };
    for (int64_t r = begin; r < end; r++) {
      touched.clear();
      for (int64_t a = step_ptr[r]; a < step_ptr[r + 1]; a++) {
        const int32_t j = step_cols[a];
        const float weight = step_vals[a];
        for (int64_t b = j * width; b < j * width + op_counts[j]; b++) row_sums.add(op_cols[b], weight * op_vals[b]);
      }
      if (own_value != 0.0f) row_sums.add(static_cast<int32_t>(r), own_value);
      const int64_t count = std::min<int64_t>(keep, static_cast<int64_t>(touched.size()));
      if (count < static_cast<int64_t>(touched.size())) {
        std::nth_element(touched.begin(), touched.begin() + count, touched.end(), larger);
      }
      counts[r] = count;
      for (int64_t m = 0; m < keep; m++) {  // unused slots: the row itself at 0, never uninitialised memory
        columns[r * keep + m] = m < count ? touched[m] : static_cast<int32_t>(r);
        values[r * keep + m] = m < count ? sums[touched[m]] : 0.0f;
      }
      for (const int32_t column : touched) {
        row_sums.sums[column] = 0.0f;
        row_sums.seen[column] = 0;
      }
    }
  });
  return {counts_t, columns_t, values_t};
}

// Dropout's keep mask: element i is kept (true) with probability 1 - p.
Tensor dropout_mask(at::IntArrayRef shape, double p, int64_t seed_value) {
  TORCH_CHECK_VALUE(0.0 <= p && p < 1.0, "sgt::dropout_mask: p must be in [0, 1), found ", p);
  Tensor keep_t = at::empty(shape, at::kBool);
  bool* keep = keep_t.data_ptr<bool>();
  const uint64_t seed = static_cast<uint64_t>(seed_value);
  at::parallel_for(0, keep_t.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) keep[i] = uniform01(seed, static_cast<uint64_t>(i)) >= p;
  });
  return keep_t;
}

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

// The schemas: library.py reads these `m.def` lines to define the same operators where this file cannot
// be built, so keep each on one line.
TORCH_LIBRARY(sgt, m) {
  m.def("edges_by_source(Tensor ptr, Tensor src, Tensor code) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("edge_attention(Tensor query, Tensor key_value, Tensor edge_scale, Tensor edge_bias, Tensor ptr, Tensor src, Tensor code, Tensor source_ptr, Tensor source_edge, Tensor source_dst, Tensor source_code, float temperature, float clip, Tensor? features=None) -> (Tensor, Tensor, Tensor)");
  m.def("edge_attention_backward(Tensor grad_out, Tensor? grad_scores, Tensor query, Tensor key_value, Tensor edge_scale, Tensor scores, Tensor inside, Tensor ptr, Tensor src, Tensor code, Tensor source_ptr, Tensor source_edge, Tensor source_dst, Tensor source_code, float temperature, Tensor? features=None) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("slot_attention(Tensor query, Tensor key_value, Tensor edge_scale, Tensor edge_bias, Tensor neighbours, Tensor code, Tensor mask, int heads, Tensor? features=None) -> (Tensor, Tensor)");
  m.def("slot_attention_backward(Tensor grad_out, Tensor query, Tensor key_value, Tensor edge_scale, Tensor neighbours, Tensor code, Tensor attention, int heads, Tensor? features=None) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("projected_slot_attention(Tensor query_x, Tensor key_x, Tensor query_weight, Tensor query_bias, Tensor kv_weight, Tensor kv_bias, Tensor edge_scale, Tensor edge_bias, Tensor neighbours, Tensor code, Tensor mask, int heads, Tensor? features=None) -> (Tensor, Tensor)");
  m.def("sample_neighbours(Tensor ptr, Tensor scores, Tensor? nodes, int degree, int method, int seed) -> Tensor");
  m.def("dropout_mask(int[] shape, float p, int seed) -> Tensor");
  m.def("propagation_step(Tensor step_ptr, Tensor step_cols, Tensor step_vals, Tensor op_counts, Tensor op_cols, Tensor op_vals, float teleport, int keep) -> (Tensor, Tensor, Tensor)");
}

// The CPU kernels; the torch implementations for other devices are registered in Python
// (sgt_core/models/fused_{edge,slot}_attention.py).
TORCH_LIBRARY_IMPL(sgt, CPU, m) {
  m.impl("edges_by_source", &edges_by_source);
  m.impl("edge_attention", &edge_attention);
  m.impl("edge_attention_backward", &edge_attention_backward);
  m.impl("slot_attention", &slot_attention);
  m.impl("slot_attention_backward", &slot_attention_backward);
  m.impl("sample_neighbours", &sample_neighbours);
  m.impl("propagation_step", &propagation_step);
}

// dropout_mask takes no tensor to dispatch on; it always makes a CPU mask. projected_slot_attention is
// the projections and slot_attention on any device.
TORCH_LIBRARY_IMPL(sgt, CompositeExplicitAutograd, m) {
  m.impl("dropout_mask", &dropout_mask);
  m.impl("projected_slot_attention", &projected_slot_attention);
}

TORCH_LIBRARY_IMPL(sgt, Autograd, m) {
  m.impl("edge_attention", &edge_attention_autograd);
  m.impl("slot_attention", &slot_attention_autograd);
  m.impl("projected_slot_attention", &projected_slot_attention_autograd);
}
