// The routings the fused MoE layers' GPU tests draw (gpu_fused_moe_test.cpp,
// gpu_fused_moe_fp8_test.cpp): top_k distinct experts per token like a router's, or skewed (few
// experts, one expert for all), or with invalid ids that the layers must drop.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace kiln::testing {

enum class Ids {
  kRouter,      // top_k distinct experts per token, uniformly (moe_route's output)
  kFewExperts,  // distinct, from a few experts only (never the first or the last): most experts empty
  kOneExpert,   // every token's first choice is the same expert (its others distinct)
  kDropped,     // a fifth of the choices -1, E, E + 5, INT_MIN or INT_MAX; one token with none valid
  kAllDropped,  // every choice -1, E, E + 5, INT_MIN or INT_MAX: out is all zeros
};

inline const char* IdsName(Ids kind) {
  static const char* const kNames[] = {"router", "few experts", "one expert", "dropped", "all dropped"};
  return kNames[static_cast<int>(kind)];
}

inline std::vector<int32_t> MakeIds(Ids kind, int64_t tokens, int64_t top_k, int64_t experts, std::mt19937& rng) {
  std::vector<int32_t> pool(static_cast<size_t>(experts));
  std::iota(pool.begin(), pool.end(), 0);
  const int32_t hot = static_cast<int32_t>(experts / 2);
  if (kind == Ids::kFewExperts && experts >= top_k + 3) {
    pool.erase(pool.begin());  // the first and the last expert stay empty
    pool.pop_back();
    std::shuffle(pool.begin(), pool.end(), rng);
    pool.resize(static_cast<size_t>(std::max<int64_t>(top_k + 1, experts / 8)));
  }
  if (kind == Ids::kOneExpert) pool.erase(std::find(pool.begin(), pool.end(), hot));
  const int32_t e32 = static_cast<int32_t>(experts);
  const int32_t bad[] = {-1, -1, e32, e32 + 5, INT_MIN, INT_MAX};
  std::uniform_int_distribution<int> fifth(0, 4), which(0, 5);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * top_k));
  for (int64_t t = 0; t < tokens; ++t) {
    int32_t* row = ids.data() + t * top_k;
    int64_t j = 0;
    if (kind == Ids::kOneExpert) row[j++] = hot;
    for (int64_t p = 0; j < top_k; ++j, ++p) {  // a partial Fisher-Yates over the pool
      std::uniform_int_distribution<int64_t> pick(p, static_cast<int64_t>(pool.size()) - 1);
      std::swap(pool[static_cast<size_t>(p)], pool[static_cast<size_t>(pick(rng))]);
      row[j] = pool[static_cast<size_t>(p)];
    }
    if (kind == Ids::kDropped || kind == Ids::kAllDropped)
      for (j = 0; j < top_k; ++j)
        if (kind == Ids::kAllDropped || fifth(rng) == 0 || t == tokens / 2) row[j] = bad[which(rng)];
  }
  return ids;
}

}  // namespace kiln::testing
