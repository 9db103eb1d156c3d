// OpRegistry::Builtin: the one list of op families the daemon serves.
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/activation/act_and_mul_generator.h"
#include "kernels/ops/comm/all_reduce_generator.h"
#include "kernels/ops/decode/append_paged_kv_generator.h"
#include "kernels/ops/decode/batch_decode_generator.h"
#include "kernels/ops/diag/tensor_stats_generator.h"
#include "kernels/ops/norm/rmsnorm_generator.h"
#include "kernels/ops/rope/rope_generator.h"
#include "kernels/ops/sampling/sampling_generator.h"

namespace kiln::kernels {

const OpRegistry& OpRegistry::Builtin() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    r->Add(MakeRmsNormGenerator());
    r->Add(MakeFusedAddRmsNormGenerator());
    r->Add(MakeAllReduceGenerator());
    r->Add(MakeAllReduceAddRmsNormGenerator());
    r->Add(MakeBatchDecodeGenerator());
    r->Add(MakeAppendPagedKvGenerator());
    r->Add(MakeApplyRopeGenerator());
    r->Add(MakeApplyRopeWithCosSinCacheGenerator());
    r->Add(MakeSiluAndMulGenerator());
    r->Add(MakeGeluAndMulGenerator());
    r->Add(MakeGeluTanhAndMulGenerator());
    r->Add(MakeTopKSamplingGenerator());
    r->Add(MakeTopPSamplingGenerator());
    r->Add(MakeTopKTopPSamplingGenerator());
    r->Add(MakeMinPSamplingGenerator());
    r->Add(MakeArgmaxGenerator());
    r->Add(MakeTensorStatsGenerator());
    return r;
  }();
  return *registry;
}

const OpGenerator* OpRegistry::Find(std::string_view name) const {
  for (const auto& op : ops_) {
    if (op->name() == name) return op.get();
  }
  return nullptr;
}

absl::StatusOr<JitSpec> OpRegistry::Generate(std::string_view name, const Params& params,
                                             const TreeSnapshot& tree) const {
  const OpGenerator* op = Find(name);
  if (op == nullptr) {
    std::vector<std::string> known;
    for (const auto& o : ops_) known.emplace_back(o->name());
    std::sort(known.begin(), known.end());
    return absl::NotFoundError(absl::StrCat("unknown op '", std::string(name), "'; known ops: ",
                                            known.empty() ? "(none)" : absl::StrJoin(known, ", ")));
  }
  return op->Generate(params, tree);
}

void OpRegistry::Add(std::unique_ptr<OpGenerator> op) { ops_.push_back(std::move(op)); }

}  // namespace kiln::kernels
