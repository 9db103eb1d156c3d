// TuningStore: the daemon's tuning store (kilnd --tuning-store): one SQLite file of tuning
// records (kiln.v1.TuningRecord), one row per key (op, bucket, environment). WAL journal, full
// sync (a result costs seconds of GPU time and writes are rare), one connection serialized by
// a mutex; other processes may open the same file.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/tuning.pb.h"

struct sqlite3;

namespace kiln::server {

class TuningStore {
 public:
  // The layout of the tunings table, stored in meta.schema_version.
  static constexpr int kSchemaVersion = 1;
  // SQLite waits this long for another process's write lock before UNAVAILABLE.
  static constexpr int kBusyTimeoutMs = 15000;

  // Opens or creates the file (its folder must exist). A schema this build does not know is
  // FAILED_PRECONDITION naming both versions.
  static absl::StatusOr<std::unique_ptr<TuningStore>> Open(const std::string& path);
  ~TuningStore();

  // Stores `record` (checked by the caller) under its key; true when it replaced a record.
  absl::StatusOr<bool> Put(const v1::TuningRecord& record);
  // Every record of `op` and `bucket`, under any environment, newest first.
  absl::StatusOr<std::vector<v1::TuningRecord>> Find(const std::string& op, const std::string& bucket);
  // Every record of `op` (empty: of every op), ordered by op, bucket and recording time.
  absl::StatusOr<std::vector<v1::TuningRecord>> List(const std::string& op);
  // Deletes the records of `op` (and `bucket`, when not empty); `op` empty: every record.
  // The number deleted.
  absl::StatusOr<uint64_t> Delete(const std::string& op, const std::string& bucket);
  absl::StatusOr<uint64_t> Count();

  const std::string& path() const { return path_; }

 private:
  TuningStore() = default;
  absl::Status Configure();  // WAL, synchronous, schema
  absl::StatusOr<std::vector<v1::TuningRecord>> Select(const std::string& where_sql,
                                                       const std::vector<std::string>& binds);

  sqlite3* db_ = nullptr;
  std::string path_;
  std::mutex mu_;
};

}  // namespace kiln::server
