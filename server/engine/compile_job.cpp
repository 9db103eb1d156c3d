// The job half of KernelEngine's lifecycle: runs on a compile slot of the scheduler.
//   per-key file lock → look up again (another process may have built it meanwhile) →
//   the fleet's lease (--remote-cache: wait while another daemon compiles the key) →
//   write the sources to the generated workspace → compile → commit → serve → publish.
#include <thread>

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "cache/cache_key.h"
#include "cache/sha256.h"
#include "kernels/jit/generation_workspace.h"
#include "server/engine/clock.h"
#include "server/engine/compile_log.h"
#include "server/engine/debug_controls.h"
#include "server/engine/kernel_engine.h"
#include "server/rpc/wire_forms.h"

namespace kiln::server {
namespace {

// The log a failed compile carried, bounded as every kept log is (compile_log.h).
std::string LogOf(const absl::Status& s) {
  auto payload = s.GetPayload(kCompileLogPayload);
  return payload ? BoundedCompileLog(std::string(*payload)) : "";
}

// Releases the fleet's lease of a key on every way out of a job that did not hand it to
// PublishRemote (a failed, abandoned or refused compile), so that a waiting daemon takes over
// at once instead of after the lease expires.
class LeaseRelease {
 public:
  LeaseRelease(RemoteCache* remote, const std::string& key) : remote_(remote), key_(key) {}
  ~LeaseRelease() {
    if (held) remote_->ReleaseLease(key_);
  }
  bool held = false;

 private:
  RemoteCache* remote_;
  const std::string& key_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Artifact>> KernelEngine::AwaitFleet(const std::shared_ptr<Flight>& flight,
                                                                         const Prepared& p, bool* leased) {
  bool waited = false;
  for (;;) {
    // GetKernel looked a moment ago; from the second round on, the holder may have published.
    // (A lease taken is followed by one more look, below, which covers the first round.)
    if (waited) {
      if (auto artifact = FromRemote(p)) {
        stats_.remote_hits++;
        return artifact;
      }
    }
    switch (remote_->TryLease(p.key)) {
      case RemoteCache::Lease::kUnavailable: return nullptr;  // Redis is down: compile without the fleet
      case RemoteCache::Lease::kAcquired:
        // The holder before us may have published between our look and our lease.
        if (auto artifact = FromRemote(p)) {
          stats_.remote_hits++;
          remote_->ReleaseLease(p.key);
          return artifact;
        }
        *leased = true;
        return nullptr;
      case RemoteCache::Lease::kHeld: break;
    }
    if (!waited) {
      waited = true;
      remote_->CountLeaseWait();
      spdlog::info("job {}: another daemon is compiling {} for {} (it holds the key's lease in the remote cache {}); "
                   "waiting for its value",
                   flight->job_id, p.spec.uri, p.arch.str(), remote_->url().str());
    }
    if (shutting_down_)
      return absl::UnavailableError(absl::StrCat("kilnd is shutting down and stopped waiting for another daemon's "
                                                 "compile of ",
                                                 p.spec.uri, "; retry once it is back"));
    // Never past the job's deadline; a holder that died leaves a lease that expires, and a
    // holder whose compile failed deletes it: either way the next try takes it.
    if (flight->abandoned || Clock::now() + remote_->poll() >= flight->job_deadline)
      return absl::DeadlineExceededError(
          absl::StrCat("waited for another daemon's compile of ", p.spec.uri, " for ", p.arch.str(),
                       " (its lease in the remote cache ", remote_->url().str(),
                       ") until the job's deadline (--job-timeout-s ", options_.job_timeout_s, ")"));
    std::this_thread::sleep_for(remote_->poll());
  }
}

void KernelEngine::PublishRemote(const Prepared& p, const Artifact& a, bool leased) {
  v1::BundleEntry e;
  e.set_op(p.spec.op);
  for (const auto& [k, v] : p.spec.params) (*e.mutable_params())[k] = v;
  e.set_uri(p.spec.uri);
  e.set_arch(p.arch.str());
  for (const auto& o : p.key_options) e.add_options(o);
  e.set_cache_key(p.key);
  e.set_sha256(a.sha256);
  e.set_size_bytes(a.cubin->size());
  for (const auto& k : a.kernels) ToWire(k, e.add_kernels());
  remote_->Publish(std::move(e), a.cubin, leased);
}

void KernelEngine::RunJob(const std::shared_ptr<Flight>& flight, const std::shared_ptr<const Prepared>& shared) {
  const Prepared& p = *shared;
  if (flight->abandoned) return;
  const auto started = Clock::now();
  v1::Timings& t = flight->timings;  // only this thread writes it before Finish
  t.set_queue_ms(std::chrono::duration<double, std::milli>(started - flight->submitted).count());

  auto fail = [&](const absl::Status& status, const std::string& log) {
    stats_.compile_failures++;
    jobs_.Update(flight->job_id, [&](v1::Job& j) {
      if (j.state() == v1::JOB_STATE_ABANDONED) return;
      j.set_state(v1::JOB_STATE_FAILED);
      j.set_error(std::string(status.message()));
      j.set_log(log);
      j.mutable_timings()->set_total_ms(MsSince(flight->submitted));
      SetTimestampNow(j.mutable_finished());
    });
    spdlog::warn("job {} ({} for {}) failed: {}", flight->job_id, p.spec.uri, p.arch.str(),
                 std::string(status.message()));
    absl::Status out(status.code(), absl::StrCat(status.message(), " [job ", flight->job_id,
                                                 "; full log: kiln jobs get ", flight->job_id, "]"));
    Finish(flight, out, v1::ORIGIN_COMPILED);
  };

  // 1. The key's cross-process lock: at most one compile per key among every process that
  //    shares this cache folder. The kernel releases it if the holder dies.
  std::optional<cache::FileLock> key_lock;
  if (cache_) {
    jobs_.Update(flight->job_id, [&](v1::Job& j) {
      j.set_state(v1::JOB_STATE_WAITING_FOR_LOCK);
      j.mutable_timings()->set_queue_ms(t.queue_ms());
    });
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(flight->job_deadline - Clock::now());
    auto t_lock = Clock::now();
    auto lock = cache_->LockKey(p.key, std::max(remaining, std::chrono::milliseconds(1)));
    t.set_lock_ms(MsSince(t_lock));
    if (!lock.ok()) return fail(lock.status(), "");
    key_lock.emplace(std::move(*lock));
    key_lock->RemoveOnRelease();  // locks/ holds only the keys being compiled

    // 2. Look again: whoever held the lock may have committed this key.
    auto again = cache_->Lookup(p.key, p.compat, [&](const std::string& problem) { spdlog::warn("{}", problem); });
    if (!again.ok()) return fail(again.status(), "");
    if (again->has_value()) {
      auto artifact = ArtifactFromRecord(p, **again);
      memory_.Put(artifact);
      jobs_.Update(flight->job_id, [&](v1::Job& j) {
        j.set_state(v1::JOB_STATE_REUSED);
        j.mutable_timings()->set_lock_ms(t.lock_ms());
        j.mutable_timings()->set_total_ms(MsSince(flight->submitted));
        SetTimestampNow(j.mutable_finished());
      });
      return Finish(flight, std::shared_ptr<const Artifact>(artifact), v1::ORIGIN_DISK);
    }
  }

  // 2b. The fleet's single flight: with a remote cache, one daemon of the fleet compiles a key
  //     (it holds the key's lease in Redis); the others wait here for its value. Below the local
  //     flight and file lock, so one job per key per cache folder takes part.
  LeaseRelease lease(remote_.get(), p.key);
  if (remote_) {
    auto t_fleet = Clock::now();
    auto fleet = AwaitFleet(flight, p, &lease.held);
    t.set_lock_ms(t.lock_ms() + MsSince(t_fleet));
    if (!fleet.ok()) return fail(fleet.status(), "");
    if (*fleet) {
      jobs_.Update(flight->job_id, [&](v1::Job& j) {
        j.set_state(v1::JOB_STATE_REUSED);
        j.mutable_timings()->set_lock_ms(t.lock_ms());
        j.mutable_timings()->set_total_ms(MsSince(flight->submitted));
        SetTimestampNow(j.mutable_finished());
      });
      return Finish(flight, *fleet, v1::ORIGIN_REMOTE);
    }
  }

  // 3. The exact sources, for people and tools (the compile itself reads from memory).
  auto dir = kernels::MaterializeSpec(p.spec, options_.gen_dir);
  if (!dir.ok()) return fail(dir.status(), "");
  jobs_.Update(flight->job_id, [&](v1::Job& j) {
    j.set_state(v1::JOB_STATE_COMPILING);
    j.mutable_manifest()->set_generated_dir(*dir);
    j.mutable_timings()->set_queue_ms(t.queue_ms());
    j.mutable_timings()->set_lock_ms(t.lock_ms());
  });

  // 4. Compile.
  CompileRequest request{&p.spec, p.tree.get(), p.arch, p.extra_options, p.verbose_log, *dir};
  stats_.compiles++;
  auto compiled = compiler_->Compile(request);
  if (!compiled.ok()) return fail(compiled.status(), LogOf(compiled.status()));
  // What the job and the cache row keep of the log, and GetJob / GetEntry send.
  compiled->log = BoundedCompileLog(compiled->log);
  t.set_compile_ms(compiled->compile_ms);
  t.set_link_ms(compiled->link_ms);
  stats_.compile_seconds.Observe((compiled->compile_ms + compiled->link_ms) / 1000.0);
  if (flight->abandoned) {
    spdlog::warn("job {} finished after it was abandoned; its cubin is discarded", flight->job_id);
    return;
  }

  // 5. Commit: blob then index row, atomically visible to every process.
  auto artifact = NewArtifact(p, std::make_shared<const std::string>(std::move(compiled->cubin)), flight->job_id);
  artifact->kernels = compiled->kernels;
  auto t_commit = Clock::now();
  if (cache_) {
    cache::EntryRecord record = NewRecord(p, compiled->kernels, flight->job_id);
    record.compile_ms = compiled->compile_ms + compiled->link_ms;
    if (auto job = jobs_.Get(flight->job_id))
      (void)google::protobuf::util::MessageToJsonString(job->manifest(), &record.manifest_json);
    record.compile_log = compiled->log;
    auto committed = cache_->Commit(std::move(record), *artifact->cubin);
    if (!committed.ok()) return fail(committed.status(), compiled->log);
    artifact->sha256 = committed->sha256;
    artifact->blob_path = cache_->blobs().PathOf(committed->sha256);
    memory_.Put(artifact);
  } else {
    artifact->sha256 = cache::Sha256Hex(*artifact->cubin);
  }
  t.set_commit_ms(MsSince(t_commit));
  key_lock.reset();
  // 6. Publish for the fleet, in the background; the lease goes once the value is written.
  if (remote_) {
    PublishRemote(p, *artifact, lease.held);
    lease.held = false;
  }

  jobs_.Update(flight->job_id, [&](v1::Job& j) {
    if (j.state() == v1::JOB_STATE_ABANDONED) return;
    j.set_state(v1::JOB_STATE_SUCCEEDED);
    j.set_log(compiled->log);
    auto* jt = j.mutable_timings();
    jt->set_queue_ms(t.queue_ms());
    jt->set_lock_ms(t.lock_ms());
    jt->set_compile_ms(t.compile_ms());
    jt->set_link_ms(t.link_ms());
    jt->set_commit_ms(t.commit_ms());
    jt->set_total_ms(MsSince(flight->submitted));
    SetTimestampNow(j.mutable_finished());
  });
  const v1::DebugControls debug = DebugControlsOf(p.key_options);
  std::string controls = absl::StrCat(debug.lineinfo() ? " lineinfo" : "", debug.device_debug() ? " device-debug" : "",
                                      debug.verbose_log() ? " verbose-log" : "");
  spdlog::info("compiled {} for {} in {:.1f} ms (job {}, key {}){}", p.spec.uri, p.arch.str(),
               t.compile_ms() + t.link_ms(), flight->job_id, p.key.substr(0, 16),
               controls.empty() ? "" : absl::StrCat("; debug compile:", controls));
  Finish(flight, std::shared_ptr<const Artifact>(artifact), v1::ORIGIN_COMPILED);
}

}  // namespace kiln::server
