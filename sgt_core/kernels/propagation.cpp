// The steps of the local branch's top-k propagation rows: the CPU kernel.

#include "common.h"

namespace {

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

}  // namespace

TORCH_LIBRARY_IMPL(sgt, CPU, m) {
  m.impl("propagation_step", &propagation_step);
}
