// The tuning results of this process: what the gemm op and the tuner (kiln::tune) call.
//
// Results persist only to an explicit location: the file named by KILN_TUNING_FILE when it is
// set, else the daemon's tuning store (kilnd --tuning-store). A daemon without one keeps
// nothing: lookups find nothing and stores are dropped, said once at the loader log level
// (KILN_LOADER_LOG=1). A stored result is reused only where its environment equals this one;
// otherwise it is ignored, and the loader log says once per (op, bucket) which fields differ.
// After the first call of a process, a lookup costs a search in memory: no RPC and no file read
// per call (tuning_store.h).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "client/core/tuning/tuning_store.h"
#include "kiln/status.h"

namespace kiln::client {

// The variable naming the tuning file.
inline constexpr const char* kTuningFileEnv = "KILN_TUNING_FILE";

// The record of (op, bucket) measured in `environment`, or none; the store's error (a bad
// KILN_TUNING_FILE, the daemon unreachable) otherwise. Callers fall back to their heuristic on
// either.
StatusOr<std::optional<TuningRecord>> LookupTuning(std::string_view op, std::string_view bucket,
                                                   const TuningEnvironment& environment);

// Keeps `record` (replacing the record of the same op, bucket and environment).
// INVALID_ARGUMENT naming the field for a bad record (proto/tuning_checks.h); OK without
// keeping it when the daemon has no store (said once at the loader log level).
Status StoreTuning(const TuningRecord& record);

// The daemon's blocklist (kilnd --tactic-blocklist), asked once per process; empty when the
// daemon has none or predates it. The daemon's error when it cannot be reached.
StatusOr<std::vector<BlockedTactic>> DaemonBlockedTactics();

// Where this process's results go, for a tuner's report: "KILN_TUNING_FILE /x", "the tuning
// store /y of kilnd at unix:/z", or "nowhere: ..." and why.
StatusOr<std::string> TuningStoreDescription();

// The logic of the functions above over a given store (tests give their own store and log).
class TuningRecords {
 public:
  // `store` null: nothing is kept, for the reason `why_none`. `log` gets the loader-level lines.
  TuningRecords(std::unique_ptr<TuningStore> store, std::string why_none, std::function<void(const std::string&)> log);

  StatusOr<std::optional<TuningRecord>> Lookup(std::string_view op, std::string_view bucket,
                                               const TuningEnvironment& environment);
  Status Store(const TuningRecord& record);
  std::string Describe() const;

 private:
  void SayNoStoreOnce();

  std::unique_ptr<TuningStore> store_;
  std::string why_none_;
  std::function<void(const std::string&)> log_;
  std::mutex mu_;
  bool said_no_store_ = false;
  std::set<std::string> said_mismatch_;  // "op\nbucket"
};

// The TuningRecords of this process for the current daemon target: KILN_TUNING_FILE, else the
// daemon's store, chosen on first use (one GetTuningInfo).
StatusOr<TuningRecords*> ProcessTuningRecords();

}  // namespace kiln::client
