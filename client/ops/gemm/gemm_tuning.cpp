#include "client/ops/gemm/gemm_tuning.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "client/core/loader/loader_log.h"
#include "client/core/tuning/daemon_tuning.h"
#include "client/core/tuning/tuning_records.h"
#include "proto/tactic_blocklist.h"

namespace kiln::client {
namespace {

// How long a failed context (the daemon unreachable, no driver) is kept before it is asked again.
constexpr auto kRetryAfter = std::chrono::seconds(60);

void SayOnce(const std::string& line) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(line).second && LoaderLogEnabled()) WriteLoaderLine(line);
}

}  // namespace

std::shared_ptr<const GemmTuningContext> GemmTuningContextFor(int ordinal) {
  struct Entry {
    std::shared_ptr<const GemmTuningContext> context;
    std::chrono::steady_clock::time_point asked;
  };
  static std::mutex mu;
  static std::map<int, Entry> known;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(ordinal);
        it != known.end() && (it->second.context->ok || now - it->second.asked < kRetryAfter))
      return it->second.context;
  }
  auto context = std::make_shared<GemmTuningContext>();
  auto environment = CurrentTuningEnvironment(ordinal, gemm::kGemmTacticSpaceVersion);
  auto daemon = GetDaemonTuning();
  if (!environment.ok()) {
    context->why_not = environment.status().ToString();
  } else if (!daemon.ok()) {
    context->why_not = daemon.status().ToString();
  } else {
    context->ok = true;
    context->environment = *environment;
    context->daemon_blocked = (*daemon)->blocked;
  }
  if (!context->ok)
    SayOnce("[kiln loader] gemm on device " + std::to_string(ordinal) +
            ": no tuned tactics or daemon blocklist (the heuristic decides): " + context->why_not);
  std::lock_guard<std::mutex> lock(mu);
  known[ordinal] = Entry{context, now};
  return context;
}

namespace {
std::atomic<uint64_t> tuning_generation{0};
}  // namespace

uint64_t GemmTuningGeneration() { return tuning_generation.load(std::memory_order_acquire); }
void BumpGemmTuningGeneration() { tuning_generation.fetch_add(1, std::memory_order_acq_rel); }

int64_t GemmBucketM(int64_t m) {
  int64_t bucket = 1;
  while (bucket < m) bucket *= 2;
  return bucket;
}

std::string GemmTuningBucket(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k) {
  return std::string(DTypeName(dtype)) + ".o" + DTypeName(out_dtype) + ".m" + std::to_string(GemmBucketM(m)) + ".n" +
         std::to_string(n) + ".k" + std::to_string(k);
}

std::string GroupedTuningBucket(DType dtype, DType out_dtype, int groups, int64_t rows_per_group, int64_t n,
                                int64_t k) {
  return std::string(DTypeName(dtype)) + ".o" + DTypeName(out_dtype) + ".e" + std::to_string(groups) + ".m" +
         std::to_string(GemmBucketM(rows_per_group)) + ".n" + std::to_string(n) + ".k" + std::to_string(k);
}

bool GemmTacticBlocked(std::string_view op, const gemm::GemmTactic& tactic, const GemmTacticControls& controls,
                       const GemmDeviceFacts& device, const GemmTuningContext& context) {
  if (controls.Blocks(op, tactic, device.name, context.ok ? &context.environment : nullptr)) return true;
  return context.ok && !context.daemon_blocked.empty() &&
         proto::IsTacticBlocked(context.daemon_blocked, op, GemmTacticText(tactic, op), context.environment);
}

std::vector<gemm::GemmTactic> FallbackTactics(std::string_view op, const gemm::GemmTactic& heuristic) {
  std::vector<gemm::GemmTactic> out = {heuristic};
  for (auto [tile_m, tile_n] : gemm::kGemmTilesInOrder)
    for (int stages = gemm::kMaxStages; stages >= gemm::kMinStages; --stages)
      for (int g = 0; g <= gemm::kMaxGroupM; ++g) {
        const gemm::GemmTactic t{tile_m, tile_n, stages, g == 0 ? 8 : g, 1};
        if ((g == 8) || !TacticInSpace(op, t) || gemm::SameGemmTactic(t, heuristic)) continue;
        out.push_back(t);
      }
  return out;
}

StatusOr<ChosenGemmTactic> ChooseTactic(const TacticQuestion& q, const GemmTacticControls& controls, bool skip_tuned) {
  if (const gemm::GemmTactic* forced = controls.Forced(q.op))
    return ChosenGemmTactic{*forced, GemmTacticSource::kForced};
  const std::shared_ptr<const GemmTuningContext> context = GemmTuningContextFor(q.device_ordinal);
  if (!skip_tuned) {
    if (auto tuned = TunedTactic(q.op, q.bucket, controls, *q.device, *context))
      return ChosenGemmTactic{*tuned, GemmTacticSource::kTuned};
  }
  // The heuristic's tactic is almost never blocked: ask about it before building the ranking.
  if ((controls.blocked.empty() && (!context->ok || context->daemon_blocked.empty())) ||
      !GemmTacticBlocked(q.op, q.heuristic, controls, *q.device, *context))
    return ChosenGemmTactic{q.heuristic, GemmTacticSource::kHeuristic};
  for (const gemm::GemmTactic& t : q.ranked ? q.ranked() : FallbackTactics(q.op, q.heuristic))
    if (!GemmTacticBlocked(q.op, t, controls, *q.device, *context))
      return ChosenGemmTactic{t, GemmTacticSource::kHeuristic};
  return Status(StatusCode::kFailedPrecondition, std::string(q.api) +
                                                     ": the tactic blocklists (KILN_TACTIC_BLOCKLIST, "
                                                     "kilnd --tactic-blocklist) block every " +
                                                     std::string(q.op) + " tactic on " + q.device->name);
}

namespace {

struct TacticCallKeyHash {
  size_t operator()(const TacticCallKey& x) const {
    size_t h = std::hash<int64_t>()(x.m) * 1000003u ^ std::hash<int64_t>()(x.n) * 10007u ^ std::hash<int64_t>()(x.k);
    h ^= std::hash<std::string_view>()(x.op) * 31u + static_cast<size_t>(x.groups) * 131u +
         static_cast<size_t>(x.epilogue) * 7919u;
    return h ^ (static_cast<size_t>(x.device) << 48) ^ (static_cast<size_t>(x.dtype) << 56) ^
           (static_cast<size_t>(x.out_dtype) << 60);
  }
};
struct RememberedEntry {
  ChosenGemmTactic chosen;
  std::chrono::steady_clock::time_point at;
  uint64_t generation;
};
using RememberedTactics = std::unordered_map<TacticCallKey, RememberedEntry, TacticCallKeyHash>;
RememberedTactics& ThreadTactics() {
  thread_local RememberedTactics tactics;
  return tactics;
}

}  // namespace

const ChosenGemmTactic* FindRememberedTactic(const TacticCallKey& key) {
  RememberedTactics& tactics = ThreadTactics();
  auto it = tactics.find(key);
  if (it == tactics.end() || it->second.generation != GemmTuningGeneration() ||
      std::chrono::steady_clock::now() - it->second.at >= std::chrono::seconds(1))
    return nullptr;
  return &it->second.chosen;
}

void RememberTactic(const TacticCallKey& key, const ChosenGemmTactic& chosen) {
  RememberedTactics& tactics = ThreadTactics();
  if (tactics.size() >= 4096) tactics.clear();  // many distinct shapes: start over rather than grow
  tactics[key] = RememberedEntry{chosen, std::chrono::steady_clock::now(), GemmTuningGeneration()};
}

std::optional<gemm::GemmTactic> TunedTactic(std::string_view op, const std::string& bucket,
                                            const GemmTacticControls& controls, const GemmDeviceFacts& device,
                                            const GemmTuningContext& context) {
  if (!context.ok) return std::nullopt;
  auto records = ProcessTuningRecords();
  if (!records.ok()) return std::nullopt;
  auto record = (*records)->Lookup(op, bucket, context.environment);
  if (!record.ok() || !record->has_value()) return std::nullopt;
  const std::string what = "[kiln loader] tuning " + std::string(op) + " " + bucket;
  auto tactic = ParseGemmTactic((*record)->tactic(), op);
  if (!tactic.ok()) {
    SayOnce(what + ": the stored tactic is not used: " + tactic.status().message());
    return std::nullopt;
  }
  if (GemmTacticBlocked(op, *tactic, controls, device, context)) {
    SayOnce(what + ": the stored tactic " + (*record)->tactic() + " is blocked here; the heuristic decides");
    return std::nullopt;
  }
  return *tactic;
}

}  // namespace kiln::client
