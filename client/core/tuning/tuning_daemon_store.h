// DaemonTuningStore: the daemon's tuning store (kilnd --tuning-store) through TuningService.
// Lookups are remembered per process: a record found stays (a newer one from another process
// is seen after a restart), a miss is asked again after `miss_ttl`, so a result another
// process stores is picked up without an RPC per call.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "client/core/rpc/daemon_connection.h"
#include "client/core/tuning/tuning_store.h"

namespace kiln::client {

class DaemonTuningStore final : public TuningStore {
 public:
  DaemonTuningStore(std::shared_ptr<const DaemonConnection> connection, std::string store_path,
                    std::chrono::milliseconds miss_ttl = std::chrono::seconds(60));

  StatusOr<TuningLookup> Lookup(const std::string& op, const std::string& bucket,
                                const TuningEnvironment& environment) override;
  Status Put(const TuningRecord& record) override;
  std::string Describe() const override;

 private:
  struct Remembered {
    TuningLookup lookup;
    std::chrono::steady_clock::time_point asked;
  };
  std::shared_ptr<const DaemonConnection> connection_;
  std::string store_path_;
  std::chrono::milliseconds miss_ttl_;
  std::mutex mu_;
  std::map<std::string, Remembered> remembered_;
};

}  // namespace kiln::client
