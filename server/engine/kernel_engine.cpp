#include "server/engine/kernel_engine.h"
#include "server/engine/clock.h"
#include "server/engine/debug_controls.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache/cache_key.h"
#include "cache/sha256.h"
#include "kernels/jit/generation_workspace.h"
#include "kiln_base/status_macros.h"
#include "proto/crc32c.h"
#include "server/engine/cache_upkeep.h"
#include "server/engine/key_inputs.h"

namespace kiln::server {
namespace fs = std::filesystem;

namespace {

std::string DaemonName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, ":", getpid());
}

// A status of the same code with `suffix` appended to its message (payloads kept).
absl::Status WithSuffix(const absl::Status& s, const std::string& suffix) {
  absl::Status out(s.code(), absl::StrCat(s.message(), suffix));
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

// PCH files are only valid in the process (and NVRTC instance) that made them: each daemon
// gets its own folder, and folders of daemons that are gone are removed at start.
std::string MakePchDir(const std::string& gen_dir) {
  std::string base = gen_dir + "/pch";
  std::error_code ec;
  fs::create_directories(base, ec);
  for (auto& entry : fs::directory_iterator(base, ec)) {
    std::string name = entry.path().filename().string();
    int pid = std::atoi(name.c_str());
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(entry.path(), ec);
  }
  std::string tmpl = base + "/" + std::to_string(getpid()) + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

}  // namespace

KernelEngine::KernelEngine(const EngineOptions& options) : options_(options), memory_(uint64_t(1) << 30) {}

KernelEngine::~KernelEngine() {
  cache_upkeep_.reset();
  if (scheduler_) scheduler_->Stop(std::chrono::milliseconds(0));
  if (!pch_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(pch_dir_, ec);
  }
}

absl::StatusOr<std::unique_ptr<KernelEngine>> KernelEngine::Create(const EngineOptions& options) {
  std::unique_ptr<KernelEngine> engine(new KernelEngine(options));
  for (const auto& text : options.arch_list) {
    auto arch = kernels::GpuArch::Parse(text);
    if (!arch.ok()) return WithSuffix(arch.status(), " (in --arch / KILN_ARCH_LIST)");
    engine->allowed_cc_.push_back(arch->cc);
  }
  std::error_code ec;
  fs::create_directories(options.gen_dir, ec);
  if (ec || access(options.gen_dir.c_str(), W_OK) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("the generated-sources workspace \"", options.gen_dir, "\" cannot be created or written (",
                     ec ? ec.message() : "not writable", "); pass --gen-dir or set KILN_GEN_DIR to a writable folder"));
  KILN_ABSL_ASSIGN_OR_RETURN(engine->tree_, kernels::KernelTree::Open(options.kernels_dir));
  engine->pch_dir_ = MakePchDir(options.gen_dir);
  engine->compiler_ = std::make_unique<NvrtcCompiler>(CompilerOptions{options.cuda_include_dir, engine->pch_dir_});
  if (options.no_cache)
    spdlog::warn("the cache is OFF (--no-cache / KILN_NO_CACHE): every request compiles and nothing is stored "
                 "(a diagnostic control; default: cached entries are reused)");
  if (!options.no_cache) {
    cache::CacheOptions cache_options;
    cache_options.dir = options.cache_dir;
    cache_options.max_bytes = uint64_t(options.cache_max_mb) << 20;
    cache_options.on_repair = [](const std::string& repair) { spdlog::warn("{}", repair); };
    cache_options.evict_in_background = true;  // by CacheUpkeep, not inside the committing request
    auto cache = cache::ArtifactCache::Open(cache_options);
    if (!cache.ok())
      return WithSuffix(cache.status(), absl::StrCat(" (artifact workspace \"", options.cache_dir,
                                                     "\"; pass --cache-dir or set KILN_CACHE_DIR)"));
    if (const auto& opened = (*cache)->last_recovery(); opened.entries_restored > 0 || opened.sidecars_removed > 0)
      spdlog::warn(
          "the cache index {}/index.sqlite had lost entries (deleted, truncated, or cut from its -wal file), or a "
          "commit was cut short: restored {} entries from their sidecars under entries/ ({} sidecars could not "
          "restore theirs and were removed). If the index was lost, find what removed it and keep index.sqlite, "
          "index.sqlite-wal and index.sqlite-shm together",
          options.cache_dir, opened.entries_restored, opened.sidecars_removed);
    if (const auto& opened = (*cache)->last_recovery(); opened.blobs_without_index > 0)
      spdlog::error(
          "the cache index {}/index.sqlite has no entries, but blobs/ holds {} cubins ({} bytes): the index was lost "
          "or replaced (index.sqlite deleted or truncated, or its -wal file removed while it held commits). Those "
          "kernels will be compiled again on request, and the unreferenced blobs removed after 10 minutes. Find "
          "what removed it (a cleanup job, a full disk) and keep index.sqlite, index.sqlite-wal and "
          "index.sqlite-shm together",
          options.cache_dir, opened.blobs_without_index, opened.blobs_without_index_bytes);
    if (const auto& opened = (*cache)->last_recovery(); opened.evicted_over_limit > 0)
      spdlog::warn("the cache {} held more than --cache-max-mb {}: evicted {} least recently used entries ({} bytes) "
                   "at start",
                   options.cache_dir, options.cache_max_mb, opened.evicted_over_limit, opened.evicted_bytes);
    engine->cache_ = std::move(*cache);
    engine->cache_upkeep_ = std::make_unique<CacheUpkeep>(engine->cache_.get(), std::chrono::seconds(1));
  }
  if (!options.prebuilt_dirs.empty()) {
    if (options.no_cache)
      spdlog::warn("--prebuilt is given with --no-cache: every request compiles, the bundles are not searched");
    KILN_ABSL_ASSIGN_OR_RETURN(engine->prebuilt_,
                               PrebuiltBundles::Open(options.prebuilt_dirs, options.prebuilt_ignore_version));
  }
  if (!options.artifact_url.empty()) {
    if (options.offline) {
      spdlog::info("offline (--offline / KILN_OFFLINE): the artifact repository {} is never contacted",
                   options.artifact_url);
    } else if (options.no_cache) {
      spdlog::warn("--artifact-url is given with --no-cache: every request compiles, the repository is not searched");
    } else {
      ArtifactRepositoryOptions repo;
      repo.url = options.artifact_url;
      repo.jobs = options.artifact_jobs;
      repo.retries = options.artifact_retries;
      repo.timeout = std::chrono::seconds(options.artifact_timeout_s);
      repo.skip_checksum = options.artifact_skip_checksum;
      repo.log_level = options.artifact_log_level;
      engine->repository_ = std::make_unique<ArtifactRepository>(repo);
    }
  }
  if (!options.remote_cache_url.empty()) {
    RemoteCacheOptions remote;
    if (std::string problem = ParseRedisUrl(options.remote_cache_url, &remote.url); !problem.empty())
      return absl::InvalidArgumentError(absl::StrCat("--remote-cache \"", options.remote_cache_url, "\" ", problem));
    if (options.offline) {
      spdlog::info("offline (--offline / KILN_OFFLINE): the remote cache {} is never contacted", remote.url.str());
    } else if (options.no_cache) {
      spdlog::warn("--remote-cache is given with --no-cache: every request compiles, the remote cache is not used");
    } else {
      remote.timeout = std::chrono::milliseconds(options.remote_cache_timeout_ms);
      remote.lease = std::chrono::milliseconds(options.remote_cache_lease_ms);
      remote.queue = options.remote_cache_queue;
      remote.owner = DaemonName();
      engine->remote_ = std::make_unique<RemoteCache>(remote);
    }
  }
  engine->scheduler_ = std::make_unique<CompileScheduler>(options.max_jobs, options.compile_memory_mb);
  return engine;
}

absl::StatusOr<std::shared_ptr<const KernelEngine::Prepared>> KernelEngine::Prepare(const KernelQuery& query,
                                                                                    bool* memoized) {
  auto tree = tree_->Current();
  std::string fingerprint = PreparedMemo::Fingerprint(query);
  *memoized = true;
  if (auto memo = prepared_memo_.Get(fingerprint, tree->generation)) return memo;
  *memoized = false;
  KILN_ABSL_ASSIGN_OR_RETURN(Prepared prepared, PrepareUncached(query, std::move(tree)));
  auto shared = std::make_shared<const Prepared>(std::move(prepared));
  prepared_memo_.Put(fingerprint, shared);
  return shared;
}

absl::StatusOr<KernelEngine::Prepared> KernelEngine::PrepareUncached(
    const KernelQuery& query, std::shared_ptr<const kernels::TreeSnapshot> tree) const {
  Prepared p;
  auto t = Clock::now();
  if (query.target_arch.empty())
    return absl::InvalidArgumentError(
        "target.arch is required: the compute capability of the device that will run the kernel, "
        "e.g. \"sm_90a\" or \"sm_80\"");
  KILN_ABSL_ASSIGN_OR_RETURN(kernels::GpuArch requested, kernels::GpuArch::Parse(query.target_arch));
  if (!allowed_cc_.empty() && std::find(allowed_cc_.begin(), allowed_cc_.end(), requested.cc) == allowed_cc_.end())
    return absl::FailedPreconditionError(
        absl::StrCat("this daemon compiles only for ", absl::StrJoin(options_.arch_list, " "),
                     " (--arch / KILN_ARCH_LIST); ", query.target_arch, " was requested"));

  p.tree = std::move(tree);
  KILN_ABSL_ASSIGN_OR_RETURN(p.spec, query.is_source
                                         ? kernels::SpecFromRawSource(query.source, *p.tree, options_.cuda_include_dir)
                                         : kernels::OpRegistry::Builtin().Generate(query.op, query.params, *p.tree));
  KILN_ABSL_ASSIGN_OR_RETURN(p.arch, kernels::ResolveArch(requested, p.spec.arch_families, p.spec.uri));
  if (query.lineinfo) p.extra_options.emplace_back(kLineinfoOption);
  if (query.device_debug) p.extra_options.emplace_back(kDeviceDebugOption);
  p.verbose_log = query.verbose_log;
  p.spec_ms = MsSince(t);

  t = Clock::now();
  CompileRequest request{&p.spec, p.tree.get(), p.arch, p.extra_options, p.verbose_log, ""};
  p.key_options = NvrtcCompiler::KeyOptions(request);
  // NOTES: a verbose log is its own entry, as -lineinfo and -G are: were it not part of the
  // key, a verbose request for a cached kernel would get the cached entry and no log at all
  // (the alternative, recompiling every verbose request beside the entry, pays NVRTC each
  // time and keeps the log only in the job history). The mark goes into the key options only:
  // NVRTC's arguments are the same (ptxas -v always runs), so the cubin is too, and the blob
  // store keeps it once.
  if (query.verbose_log) p.key_options.emplace_back(kVerboseLogOption);
  const cache::KeyInputs in = KeyInputsFor(p.spec, *p.tree, p.key_options, p.arch, compiler_->toolchain());
  for (const auto& source : in.sources) p.source_sha256.push_back(source.sha256);  // for the manifest
  p.key = cache::ComputeCacheKey(in);
  p.compat = cache::Compatibility{in.uri,          in.arch,          in.options,          in.format_version,
                                  in.kiln_version, in.nvrtc_version, in.nvjitlink_version};
  p.key_ms = MsSince(t);
  return p;
}

absl::StatusOr<ServedKernel> KernelEngine::GetKernel(const KernelQuery& query, Clock::time_point deadline,
                                                     const std::function<bool()>& cancelled) {
  const auto t0 = Clock::now();
  bool memoized = false;
  KILN_ABSL_ASSIGN_OR_RETURN(std::shared_ptr<const Prepared> prepared, Prepare(query, &memoized));
  const Prepared& p = *prepared;

  ServedKernel served;
  // A repeat request reuses its preparation: spec_ms is then the memo lookup, key_ms zero.
  served.timings.set_spec_ms(memoized ? MsSince(t0) : p.spec_ms);
  served.timings.set_key_ms(memoized ? 0.0 : p.key_ms);
  auto hit = [&](std::shared_ptr<const Artifact> artifact, v1::Origin origin, Clock::time_point t_lookup) {
    served.timings.set_lookup_ms(MsSince(t_lookup));
    served.timings.set_total_ms(MsSince(t0));
    served.artifact = std::move(artifact);
    served.origin = origin;
    served.job_id = served.artifact->job_id;
    if (cache_) cache_->RecordHit(p.key);
    stats_.RecordHitLatency(served.timings.total_ms() * 1000.0);
    return served;
  };

  auto t_lookup = Clock::now();
  if (!options_.no_cache) {
    if (auto artifact = memory_.Get(p.key)) {
      stats_.memory_hits++;
      return hit(std::move(artifact), v1::ORIGIN_MEMORY, t_lookup);
    }
    KILN_ABSL_ASSIGN_OR_RETURN(std::optional<cache::CachedArtifact> found,
                               cache_->Lookup(p.key, p.compat,
                                              [&](const std::string& problem) { spdlog::warn("{}", problem); }));
    if (found.has_value()) {
      auto artifact = ArtifactFromRecord(p, *found);
      memory_.Put(artifact);
      stats_.disk_hits++;
      return hit(std::move(artifact), v1::ORIGIN_DISK, t_lookup);
    }
    if (prebuilt_) {
      if (auto artifact = FromPrebuilt(p)) {
        stats_.prebuilt_hits++;
        return hit(std::move(artifact), v1::ORIGIN_PREBUILT, t_lookup);
      }
    }
    if (repository_) {
      if (auto artifact = FromRepository(p)) {
        stats_.repository_hits++;
        return hit(std::move(artifact), v1::ORIGIN_REPOSITORY, t_lookup);
      }
    }
    if (remote_) {
      if (auto artifact = FromRemote(p)) {
        stats_.remote_hits++;
        return hit(std::move(artifact), v1::ORIGIN_REMOTE, t_lookup);
      }
    }
  }
  served.timings.set_lookup_ms(MsSince(t_lookup));
  stats_.misses++;

  if (options_.disable_jit)
    return absl::FailedPreconditionError(absl::StrCat(
        "JIT is disabled on this daemon (--disable-jit / KILN_DISABLE_JIT) and no cached kernel exists for ",
        p.spec.uri, " on ", p.arch.str(), " (key ", p.key, ") in ", TiersSearched(),
        "; warm the cache on a daemon with JIT enabled, add a bundle that holds it (kiln aot build), or start "
        "this one without --disable-jit"));
  if (shutting_down_)
    return absl::UnavailableError("kilnd is shutting down and takes no new compiles; retry once it is back");

  bool started = false;
  KILN_ABSL_ASSIGN_OR_RETURN(std::shared_ptr<Flight> flight, StartOrJoin(prepared, query.client, &started));
  auto& f = *flight;

  // Wait for the job, waking now and then to notice a caller that gave up.
  std::unique_lock<std::mutex> lock(f.mu);
  while (!f.done) {
    auto now = Clock::now();
    if (now >= f.job_deadline) {
      lock.unlock();
      AbandonForTimeout(flight);
      lock.lock();
      continue;
    }
    if (now >= deadline)
      return absl::DeadlineExceededError(absl::StrCat("gave up waiting for compile job ", f.job_id,
                                                      " (the request's deadline passed); the job goes on, ",
                                                      "and asking again later returns its result"));
    if (cancelled && cancelled()) return absl::CancelledError("the caller cancelled the request");
    f.cv.wait_until(lock, std::min({deadline, f.job_deadline, now + std::chrono::milliseconds(100)}));
  }
  KILN_ABSL_ASSIGN_OR_RETURN(served.artifact, f.result);
  served.origin = f.origin;
  served.job_id = f.job_id;
  for (auto [set, value] : {std::pair{&v1::Timings::set_queue_ms, f.timings.queue_ms()},
                            std::pair{&v1::Timings::set_lock_ms, f.timings.lock_ms()},
                            std::pair{&v1::Timings::set_compile_ms, f.timings.compile_ms()},
                            std::pair{&v1::Timings::set_link_ms, f.timings.link_ms()},
                            std::pair{&v1::Timings::set_commit_ms, f.timings.commit_ms()}})
    (served.timings.*set)(value);
  served.timings.set_total_ms(MsSince(t0));
  return served;
}

std::string KernelEngine::TiersSearched() const {
  std::string text = absl::StrCat("the cache or the prebuilt bundles searched (",
                                  prebuilt_ ? prebuilt_->Describe() : "none: no --prebuilt", ")");
  if (repository_) absl::StrAppend(&text, " or the artifact repository ", repository_->Describe());
  else if (options_.offline && !options_.artifact_url.empty())
    absl::StrAppend(&text, "; the artifact repository ", options_.artifact_url,
                    " was not asked: the daemon is offline");
  if (remote_) absl::StrAppend(&text, " or the remote cache ", remote_->Describe());
  else if (options_.offline && !options_.remote_cache_url.empty())
    absl::StrAppend(&text, "; the remote cache ", options_.remote_cache_url, " was not asked: the daemon is offline");
  return text;
}

std::shared_ptr<Artifact> KernelEngine::NewArtifact(const Prepared& p, std::shared_ptr<const std::string> cubin,
                                                    std::string job_id) {
  auto a = std::make_shared<Artifact>();
  a->key = p.key;
  a->uri = p.spec.uri;
  a->op = p.spec.op;
  a->params = p.spec.params;
  a->arch = p.arch.str();
  a->launch = p.spec.launch;
  a->cubin = std::move(cubin);
  a->crc32c = proto::Crc32c(*a->cubin);
  a->job_id = std::move(job_id);
  return a;
}

std::shared_ptr<const Artifact> KernelEngine::ArtifactFromRecord(const Prepared& p,
                                                                 const cache::CachedArtifact& found) const {
  auto a = NewArtifact(p, found.cubin, found.record.job_id);
  a->sha256 = found.record.sha256;
  a->blob_path = found.blob_path;
  a->kernels = KernelsFromJson(found.record.kernels_json);
  return a;
}

cache::EntryRecord KernelEngine::NewRecord(const Prepared& p, const std::vector<KernelAttributes>& kernels,
                                           const std::string& job_id) const {
  cache::EntryRecord record;
  record.key = p.key;
  record.uri = p.spec.uri;
  record.op = p.spec.op;
  record.params = p.spec.params;
  record.arch = p.arch.str();
  record.options = p.key_options;
  record.format_version = cache::kCacheFormatVersion;
  const Toolchain& tc = compiler_->toolchain();
  record.kiln_version = tc.kiln;
  record.nvrtc_version = tc.nvrtc;
  record.nvjitlink_version = tc.nvjitlink;
  record.cuda_headers_version = tc.cuda_headers;
  record.job_id = job_id;
  record.kernels_json = KernelsToJson(kernels);
  record.launch_json = LaunchToJson(p.spec.launch);
  return record;
}

std::shared_ptr<const Artifact> KernelEngine::FromPrebuilt(const Prepared& p) {
  auto found = prebuilt_->Find(p.key, p.spec.uri, p.arch.str(), p.key_options,
                               [](const std::string& problem) { spdlog::warn("{}", problem); });
  if (!found) return nullptr;
  if (found->version_ignored) {
    auto artifact = NewArtifact(p, found->cubin, "");
    artifact->kernels = found->kernels;
    artifact->sha256 = found->entry.sha256();
    // Its key is not ours: kept out of the cache and the memory map, so it answers only while
    // the control is on.
    spdlog::warn("--prebuilt-ignore-version: serving {} for {} from bundle {} under ANOTHER key ({}, this "
                 "daemon's is {}); not stored",
                 p.spec.uri, p.arch.str(), found->bundle, found->entry.cache_key().substr(0, 16), p.key.substr(0, 16));
    return artifact;
  }
  return StoreFromTier(p, found->cubin, found->kernels, found->entry.sha256(),
                       absl::StrCat("the prebuilt bundle ", found->bundle));
}

std::shared_ptr<const Artifact> KernelEngine::FromRepository(const Prepared& p) {
  auto found = repository_->Find(p.key, p.spec.uri, p.arch.str());
  if (!found) return nullptr;
  return StoreFromTier(p, found->cubin, found->kernels, found->entry.sha256(),
                       absl::StrCat("the artifact repository (", found->url, ")"));
}

std::shared_ptr<const Artifact> KernelEngine::FromRemote(const Prepared& p) {
  auto found = remote_->Find(p.key, p.spec.uri, p.arch.str());
  if (!found) return nullptr;
  return StoreFromTier(p, found->cubin, found->kernels, found->entry.sha256(),
                       absl::StrCat("the remote cache ", remote_->url().str(), " (published by ", found->publisher,
                                    ")"));
}

std::shared_ptr<const Artifact> KernelEngine::StoreFromTier(const Prepared& p, std::shared_ptr<const std::string> cubin,
                                                            const std::vector<KernelAttributes>& kernels,
                                                            const std::string& sha256, const std::string& source) {
  auto artifact = NewArtifact(p, cubin, "");
  artifact->kernels = kernels;
  // The tier checked the bytes against `sha256`, unless a debugging aid skipped that check: the
  // reply carries the bytes' own hash either way, which the client verifies.
  artifact->sha256 = sha256;
  cache::EntryRecord record = NewRecord(p, kernels, "");
  (void)google::protobuf::util::MessageToJsonString(NewJob(p).manifest(), &record.manifest_json);
  record.compile_log = absl::StrCat("served from ", source, "; not compiled here");
  auto committed = cache_->Commit(std::move(record), *cubin);
  if (committed.ok()) {
    artifact->sha256 = committed->sha256;
    artifact->blob_path = cache_->blobs().PathOf(committed->sha256);
  } else {
    artifact->sha256 = cache::Sha256Hex(*cubin);
    spdlog::warn("{} for {} from {} could not be stored in the cache ({}); served all the same", p.spec.uri,
                 p.arch.str(), source, std::string(committed.status().message()));
  }
  memory_.Put(artifact);
  spdlog::info("served {} for {} from {} (key {})", p.spec.uri, p.arch.str(), source, p.key.substr(0, 16));
  return artifact;
}

v1::Job KernelEngine::NewJob(const Prepared& p) const {
  v1::Job job;
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_uri(p.spec.uri);
  job.set_cache_key(p.key);
  job.set_arch(p.arch.str());
  job.set_daemon(DaemonName());
  SetTimestampNow(job.mutable_created());
  auto* m = job.mutable_manifest();
  m->set_uri(p.spec.uri);
  m->set_op(p.spec.op);
  for (const auto& [k, v] : p.spec.params) (*m->mutable_params())[k] = v;
  size_t index = 0;  // hashes were taken once, for the key, in the same order
  for (const auto* list : {&p.spec.headers, &p.spec.units}) {
    for (const auto& f : *list) {
      auto* s = m->add_sources();
      s->set_name(f.name);
      s->set_sha256(p.source_sha256[index++]);
      s->set_size_bytes(f.content.size());
      s->set_origin(kernels::OriginName(f.origin));
      s->set_path(f.origin == kernels::SourceFile::Origin::kKernels
                      ? f.tree_path
                      : options_.gen_dir + "/" + p.spec.uri + "/" + f.name);
    }
  }
  m->set_kernels_tree_sha256(p.tree->digest);
  for (const auto& o : p.key_options) m->add_options(o);
  for (const auto& o : p.spec.link_options) m->add_link_options(o);
  for (const auto& e : p.spec.entries) m->add_entries(e);
  m->set_arch(p.arch.str());
  const Toolchain& tc = compiler_->toolchain();
  m->mutable_toolchain()->set_nvrtc(tc.nvrtc);
  m->mutable_toolchain()->set_nvjitlink(tc.nvjitlink);
  m->mutable_toolchain()->set_cuda_headers(tc.cuda_headers);
  m->mutable_toolchain()->set_kiln(tc.kiln);
  m->mutable_toolchain()->set_cache_format(cache::kCacheFormatVersion);
  m->set_generated_dir(options_.gen_dir + "/" + p.spec.uri);
  return job;
}

absl::StatusOr<std::shared_ptr<KernelEngine::Flight>> KernelEngine::StartOrJoin(
    std::shared_ptr<const Prepared> prepared, const std::string& client, bool* started) {
  std::lock_guard<std::mutex> lock(flights_mu_);
  // With --no-cache every request compiles on its own: nothing is shared, nothing is stored.
  if (!options_.no_cache) {
    if (auto it = flights_.find(prepared->key); it != flights_.end()) {
      jobs_.AddWaiter(it->second->job_id, client);
      *started = false;
      return it->second;
    }
  }
  auto flight = std::make_shared<Flight>();
  flight->key = prepared->key;
  flight->submitted = Clock::now();
  flight->job_deadline = flight->submitted + std::chrono::seconds(options_.job_timeout_s);
  flight->job_id = jobs_.Create(NewJob(*prepared));
  jobs_.AddWaiter(flight->job_id, client);
  auto shared = std::move(prepared);
  bool queued = scheduler_->Submit(
      shared->spec.compile_memory_mb, [this, flight, shared] { RunJob(flight, shared); },
      [this, flight] {
        jobs_.Update(flight->job_id, [](v1::Job& j) {
          j.set_state(v1::JOB_STATE_ABANDONED);
          j.set_error("the daemon shut down before the job started");
          SetTimestampNow(j.mutable_finished());
        });
        Finish(flight, absl::UnavailableError("kilnd shut down before the compile started; retry once it is back"),
               v1::ORIGIN_COMPILED);
      });
  if (!queued) {
    jobs_.Update(flight->job_id, [](v1::Job& j) {
      j.set_state(v1::JOB_STATE_ABANDONED);
      j.set_error("the daemon is shutting down");
    });
    return absl::UnavailableError("kilnd is shutting down and takes no new compiles; retry once it is back");
  }
  if (!options_.no_cache) flights_[flight->key] = flight;
  *started = true;
  return flight;
}

void KernelEngine::AbandonForTimeout(const std::shared_ptr<Flight>& flight) {
  if (flight->abandoned.exchange(true)) return;
  std::string why = absl::StrCat("compile job ", flight->job_id, " ran past its ", options_.job_timeout_s,
                                 " s limit (--job-timeout-s) and was abandoned; NVRTC cannot be interrupted, so it "
                                 "finishes in the background and its result is discarded");
  jobs_.Update(flight->job_id, [&](v1::Job& j) {
    j.set_state(v1::JOB_STATE_ABANDONED);
    j.set_error(why);
    SetTimestampNow(j.mutable_finished());
  });
  spdlog::error("{}", why);
  Finish(flight, absl::DeadlineExceededError(why), v1::ORIGIN_COMPILED);
}

void KernelEngine::Finish(const std::shared_ptr<Flight>& flight, absl::StatusOr<std::shared_ptr<const Artifact>> result,
                          v1::Origin origin) {
  {
    std::lock_guard<std::mutex> lock(flights_mu_);
    auto it = flights_.find(flight->key);
    if (it != flights_.end() && it->second == flight) flights_.erase(it);
  }
  {
    std::lock_guard<std::mutex> lock(flight->mu);
    if (flight->done) return;
    flight->result = std::move(result);
    flight->origin = origin;
    flight->done = true;
  }
  flight->cv.notify_all();
}

void KernelEngine::BeginShutdown() {
  shutting_down_ = true;
  jobs_.Close();
  // Queued jobs are abandoned at once; running ones may finish within the grace period.
  scheduler_->StopAccepting();
}

bool KernelEngine::FinishShutdown(std::chrono::milliseconds grace) {
  bool idle = scheduler_->Stop(grace);
  cache_upkeep_.reset();  // evicts if due and flushes buffered hit counts one last time
  return idle;
}

}  // namespace kiln::server
