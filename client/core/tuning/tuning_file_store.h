// FileTuningStore: the tuning records of KILN_TUNING_FILE, a JSON file (kiln.v1.TuningFile in
// protobuf JSON) that several processes share.
//
// Reads: the whole file once, then again only when it changed (inode, size or mtime; looked
// at no more often than `recheck`), so a lookup is a search in memory. Writes: under an
// exclusive flock of "<file>.lock", the current file is read again, the record merged in
// (replacing one of the same key), and the result written to a temp file beside it, fsynced
// and renamed over it; readers never lock, because they see the old file or the new one,
// whole. Concurrent writers of any process therefore never lose each other's records.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "client/core/tuning/tuning_store.h"

namespace kiln::client {

// The records of a tuning file's text; INVALID_ARGUMENT naming `path` for text that is not
// a TuningFile (unknown fields included: a newer Kiln's file is not rewritten by this one and
// losing its fields) or holds a bad record (proto/tuning_checks.h).
StatusOr<std::vector<TuningRecord>> ParseTuningFile(const std::string& path, const std::string& text);
// The text of a tuning file holding `records` (indented, field names as in the proto).
std::string TuningFileText(const std::vector<TuningRecord>& records);

class FileTuningStore final : public TuningStore {
 public:
  explicit FileTuningStore(std::string path, std::chrono::milliseconds recheck = std::chrono::seconds(1));

  StatusOr<TuningLookup> Lookup(const std::string& op, const std::string& bucket,
                                const TuningEnvironment& environment) override;
  Status Put(const TuningRecord& record) override;
  std::string Describe() const override { return "KILN_TUNING_FILE " + path_; }

  // Every record, as read last (refreshed first when the file changed).
  StatusOr<std::vector<TuningRecord>> Records();

 private:
  struct Stamp {
    ino_t inode = 0;
    off_t size = -1;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  // Re-reads the file when it changed since the last read. Caller holds mu_.
  Status RefreshLocked(bool force);
  // Reads the file as it is now: its records and stamp (none: empty and a zero stamp).
  Status ReadNow(std::vector<TuningRecord>* records, Stamp* stamp) const;

  const std::string path_;
  const std::chrono::milliseconds recheck_;
  std::mutex mu_;
  bool loaded_ = false;
  Stamp stamp_;
  std::chrono::steady_clock::time_point checked_;
  std::vector<TuningRecord> records_;
};

}  // namespace kiln::client
