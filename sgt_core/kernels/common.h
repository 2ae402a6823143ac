#pragma once

// What the CPU kernels of the `sgt` torch operators share. The operators: the estimator's edge softmax attention over every
// interaction-graph edge, the wide network's multi-head attention over fixed sampled slots, reservoir
// sampling, dropout masks, and the steps of the local branch's top-k propagation rows.
//
// One source per operator family, all compiled into one library: edge_attention.cpp, slot_attention.cpp,
// sampling.cpp (reservoir sampling), dropout.cpp, propagation.cpp, autograd.cpp (the attentions' autograd and
// projected_slot_attention); each registers its own kernels. This header holds what they share: argument
// checks, parallel loops, the continuous edge features' terms and the counting sort; random.h the
// counter-based generator of sampling and dropout.
//
// The operator schemas are the `m.def` lines of TORCH_LIBRARY in schemas.cpp; sgt_core/kernels/library.py
// builds these sources with torch.utils.cpp_extension and, where they cannot be built, defines the same
// schemas from those lines so that the torch implementations (sgt_core/models/fused_{edge,slot}_attention.py,
// also the CUDA path) answer the same operator names. Autograd is registered in autograd.cpp (and there,
// for the operators defined without the library).
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

}  // namespace
