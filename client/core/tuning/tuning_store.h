// TuningStore: where this process's tuning results persist — an explicit location only: the
// file named by KILN_TUNING_FILE (tuning_file_store.h) or the daemon's store
// (tuning_daemon_store.h). Lookups are served from memory per process: a gemm call must cost
// no RPC and no file read.
#pragma once

#include <optional>
#include <string>

#include "client/core/tuning/tuning_environment.h"
#include "kiln/status.h"

namespace kiln::client {

struct TuningLookup {
  std::optional<TuningRecord> record;  // the record of the key, when there is one
  // When there is none but records of the same op and bucket exist under other environments:
  // which fields differ (proto/tuning_environment.h DescribeTuningMismatch).
  std::string mismatch;
};

class TuningStore {
 public:
  virtual ~TuningStore() = default;
  virtual StatusOr<TuningLookup> Lookup(const std::string& op, const std::string& bucket,
                                        const TuningEnvironment& environment) = 0;
  // Keeps `record`, replacing the record of the same (op, bucket, environment).
  virtual Status Put(const TuningRecord& record) = 0;
  // For messages: "KILN_TUNING_FILE /x", "the tuning store /y of kilnd at unix:/z".
  virtual std::string Describe() const = 0;
};

}  // namespace kiln::client
