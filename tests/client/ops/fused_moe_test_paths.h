// The paths the fused MoE layers' GPU tests run every case on (gpu_fused_moe_test.cpp,
// gpu_fused_moe_fp8_test.cpp): the decode path's GEMVs where they take the call, then the grouped
// GEMMs, chosen for the calls in a scope (SetFusedMoePathForTesting, which serves both layers).
#pragma once

#include <catch2/catch.hpp>

#include <random>

#include "client/ops/moe/fused_moe_plan.h"
#include "tests/client/ops/moe_test_routing.h"
#include "tests/support/gpu_harness.h"

namespace kiln::testing {

using kiln::client::FusedMoePath;
inline constexpr FusedMoePath kBothPaths[] = {FusedMoePath::kGemv, FusedMoePath::kGrouped};

inline const char* PathName(FusedMoePath path) {
  return path == FusedMoePath::kGemv ? "decode path (GEMVs) where it can" : "grouped path";
}

// Calls in its scope ask for `path`; the environment's choice again after it.
struct PathScope {
  explicit PathScope(FusedMoePath path) { kiln::client::SetFusedMoePathForTesting(static_cast<int>(path)); }
  ~PathScope() { kiln::client::SetFusedMoePathForTesting(-1); }
  PathScope(const PathScope&) = delete;
  PathScope& operator=(const PathScope&) = delete;
};

// The layer's result on each path, each checked by the test's own Layer::Check.
template <class Layer>
void CheckBothPaths(Layer& layer) {
  for (FusedMoePath path : kBothPaths) {
    const PathScope scope(path);
    INFO(PathName(path));
    layer.Check(layer.Run());
  }
}

// `graph`, a captured call of `layer`, replayed on each kind of routing with a new x, each result
// checked by Layer::Check: the plan depends on the shapes alone, not on the ids.
template <class Layer>
void ReplayOnEveryRouting(Layer& layer, const CapturedCall& graph, std::mt19937& rng) {
  for (Ids kind : {Ids::kRouter, Ids::kFewExperts, Ids::kOneExpert, Ids::kDropped}) {
    INFO("replay with ids " << IdsName(kind));
    layer.NewRouting(kind, rng);
    layer.NewX(rng);
    layer.Prepare();
    graph.Replay();
    layer.Check(layer.Read(false));
  }
}

}  // namespace kiln::testing
