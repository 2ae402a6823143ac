// The `sgt` operators' schemas. Each family's source registers its kernels for them.

#include <torch/library.h>

// library.py reads these `m.def` lines to define the same operators where the library cannot be built, so
// keep each on one line.
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
