// Dropout's keep masks from the counter-based generator. The operator takes no tensor to dispatch on; it
// always makes a CPU mask.

#include "common.h"
#include "random.h"

namespace {

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

}  // namespace

TORCH_LIBRARY_IMPL(sgt, CompositeExplicitAutograd, m) {
  m.impl("dropout_mask", &dropout_mask);
}
