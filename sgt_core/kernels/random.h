#pragma once

#include "common.h"

namespace {

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

}  // namespace
