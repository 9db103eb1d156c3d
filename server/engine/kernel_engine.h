// KernelEngine: the one build-and-load lifecycle every kernel request goes through:
//   spec (op generator or raw-source policy) → arch context → cache key →
//   memory → disk (verified) → prebuilt bundles → artifact repository → remote cache (each
//   verified, then stored in the cache) →
//   [JIT disabled: refuse] → single-flight join or new job →
//   job: compile slot → per-key file lock → disk again → the fleet's lease (remote cache: wait
//   for another daemon's compile, or take the lease) → compile → commit → serve → publish.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/artifact_cache.h"
#include "kernels/jit/kernel_tree.h"
#include "kernels/jit/op_generator.h"
#include "kernels/jit/raw_source.h"
#include "kiln/v1/kernel.pb.h"
#include "server/engine/artifact.h"
#include "server/engine/cache_upkeep.h"
#include "server/engine/compile_flight.h"
#include "server/engine/compile_scheduler.h"
#include "server/engine/engine_options.h"
#include "server/engine/engine_stats.h"
#include "server/engine/job_registry.h"
#include "server/engine/memory_cache.h"
#include "server/engine/prepared_memo.h"
#include "server/jit/nvrtc_compiler.h"
#include "server/tiers/artifact_repository.h"
#include "server/tiers/prebuilt_bundles.h"
#include "server/tiers/remote_cache.h"

namespace kiln::server {

struct KernelQuery {
  bool is_source = false;
  std::string op;  // when !is_source
  kernels::Params params;
  kernels::RawSource source;  // when is_source
  std::string target_arch;
  bool lineinfo = false;
  bool device_debug = false;
  bool verbose_log = false;
  std::string client;  // who asks: shown in the job's waiter list
};

struct ServedKernel {
  std::shared_ptr<const Artifact> artifact;
  v1::Origin origin = v1::ORIGIN_UNSPECIFIED;
  std::string job_id;
  v1::Timings timings;
};

class KernelEngine {
 public:
  static absl::StatusOr<std::unique_ptr<KernelEngine>> Create(const EngineOptions& options);
  ~KernelEngine();

  // `deadline` is the caller's; `cancelled` says whether the caller gave up. Neither stops a
  // compile other requests may be waiting on.
  absl::StatusOr<ServedKernel> GetKernel(const KernelQuery& query, std::chrono::steady_clock::time_point deadline,
                                         const std::function<bool()>& cancelled);

  // Refuses new compiles, abandons queued jobs, ends job watchers. Hits are still served.
  void BeginShutdown();
  // Waits up to `grace` for running compiles; false when some were still running.
  bool FinishShutdown(std::chrono::milliseconds grace);

  // Drops an entry from the in-memory cache (after an eviction through CacheService).
  void ForgetInMemory(const std::string& key) { memory_.Erase(key); }

  cache::ArtifactCache* cache() { return cache_.get(); }                      // null with --no-cache
  const PrebuiltBundles* prebuilt() const { return prebuilt_.get(); }         // null without --prebuilt
  const ArtifactRepository* repository() const { return repository_.get(); }  // null without --artifact-url
  const RemoteCache* remote() const { return remote_.get(); }                 // null without --remote-cache
  JobRegistry& jobs() { return jobs_; }
  const CompileScheduler& scheduler() const { return *scheduler_; }  // queue depth and running jobs
  EngineStats& stats() { return stats_; }
  MemoryCache& memory() { return memory_; }
  const EngineOptions& options() const { return options_; }
  const Toolchain& toolchain() const { return compiler_->toolchain(); }
  kernels::KernelTree& tree() { return *tree_; }

 private:
  using Flight = CompileFlight;
  using Prepared = PreparedRequest;
  explicit KernelEngine(const EngineOptions& options);

  // The spec, arch and key of a request: memoized per request and kernels-tree generation.
  absl::StatusOr<std::shared_ptr<const Prepared>> Prepare(const KernelQuery& query, bool* memoized);
  absl::StatusOr<Prepared> PrepareUncached(const KernelQuery& query,
                                           std::shared_ptr<const kernels::TreeSnapshot> tree) const;
  absl::StatusOr<std::shared_ptr<Flight>> StartOrJoin(std::shared_ptr<const Prepared> prepared,
                                                      const std::string& client, bool* started);
  void RunJob(const std::shared_ptr<Flight>& flight, const std::shared_ptr<const Prepared>& prepared);
  void AbandonForTimeout(const std::shared_ptr<Flight>& flight);
  // An artifact of `prepared`'s spec, arch and key, for the cubin of `job_id`.
  static std::shared_ptr<Artifact> NewArtifact(const Prepared& prepared, std::shared_ptr<const std::string> cubin,
                                               std::string job_id);
  std::shared_ptr<const Artifact> ArtifactFromRecord(const Prepared& prepared,
                                                     const cache::CachedArtifact& found) const;
  // The cache row of `prepared`'s cubin (blob fields are the cache's to fill in).
  cache::EntryRecord NewRecord(const Prepared& prepared, const std::vector<KernelAttributes>& kernels,
                               const std::string& job_id) const;
  // The bundles' (the repository's) entry of `prepared`'s key, stored in the cache and memory;
  // null: none.
  std::shared_ptr<const Artifact> FromPrebuilt(const Prepared& prepared);
  std::shared_ptr<const Artifact> FromRepository(const Prepared& prepared);
  std::shared_ptr<const Artifact> FromRemote(const Prepared& prepared);
  // The job's step between the disk re-check and the compile, with a remote cache: the value of
  // the key if another daemon publishes it while this one waits on its lease (null: compile;
  // `*leased` says whether this daemon took the lease, to be released after publishing).
  absl::StatusOr<std::shared_ptr<const Artifact>> AwaitFleet(const std::shared_ptr<Flight>& flight,
                                                             const Prepared& prepared, bool* leased);
  // Queues a compiled cubin for the remote cache (releasing the lease after it is written).
  void PublishRemote(const Prepared& prepared, const Artifact& artifact, bool leased);
  // The tiers a --disable-jit miss searched, for its error: "the cache or the prebuilt bundles
  // searched (...)", the artifact repository and the remote cache, or why they were not asked.
  std::string TiersSearched() const;
  // A verified cubin from a tier (`source` says which, for the entry's log), stored in the cache
  // and memory.
  std::shared_ptr<const Artifact> StoreFromTier(const Prepared& prepared, std::shared_ptr<const std::string> cubin,
                                                const std::vector<KernelAttributes>& kernels, const std::string& sha256,
                                                const std::string& source);
  void Finish(const std::shared_ptr<Flight>& flight, absl::StatusOr<std::shared_ptr<const Artifact>> result,
              v1::Origin origin);
  v1::Job NewJob(const Prepared& prepared) const;

  EngineOptions options_;
  std::vector<int> allowed_cc_;  // from options_.arch_list; empty: all
  std::unique_ptr<kernels::KernelTree> tree_;
  std::unique_ptr<NvrtcCompiler> compiler_;
  std::unique_ptr<cache::ArtifactCache> cache_;
  std::unique_ptr<PrebuiltBundles> prebuilt_;
  std::unique_ptr<ArtifactRepository> repository_;
  std::unique_ptr<RemoteCache> remote_;  // outlives the scheduler: jobs publish to it
  std::string pch_dir_;
  MemoryCache memory_;
  PreparedMemo prepared_memo_;
  JobRegistry jobs_;
  EngineStats stats_;
  std::unique_ptr<CompileScheduler> scheduler_;
  std::unique_ptr<CacheUpkeep> cache_upkeep_;
  std::atomic<bool> shutting_down_{false};

  std::mutex flights_mu_;
  std::map<std::string, std::shared_ptr<Flight>> flights_;  // by cache key
};

}  // namespace kiln::server
