// Reservoir (and uniform, top-k) sampling of each node's incoming edges: the CPU kernel.

#include "common.h"
#include "random.h"

namespace {

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

}  // namespace

TORCH_LIBRARY_IMPL(sgt, CPU, m) {
  m.impl("sample_neighbours", &sample_neighbours);
}
