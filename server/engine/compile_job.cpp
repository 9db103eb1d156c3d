// The job half of KernelEngine's lifecycle: runs on a compile slot of the scheduler.
//   per-key file lock → look up again (another process may have built it meanwhile) →
//   write the sources to the generated workspace → compile → commit → serve.
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "cache/cache_key.h"
#include "cache/sha256.h"
#include "kernels/jit/generation_workspace.h"
#include "server/engine/clock.h"
#include "server/engine/debug_controls.h"
#include "server/engine/kernel_engine.h"

namespace kiln::server {
namespace {

std::string LogOf(const absl::Status& s) {
  auto payload = s.GetPayload(kCompileLogPayload);
  return payload ? std::string(*payload) : "";
}

}  // namespace

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
  t.set_compile_ms(compiled->compile_ms);
  t.set_link_ms(compiled->link_ms);
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
