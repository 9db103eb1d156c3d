// JobRegistry: every compile job of this daemon (queued, running, and the last finished
// ones), and the watchers that stream their changes (JobService.WatchJobs).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/v1/job.pb.h"

namespace kiln::server {

class JobRegistry {
 public:
  explicit JobRegistry(size_t max_finished = 1000);

  // Registers a job (its id is assigned here) and publishes it; returns the id.
  std::string Create(v1::Job job);
  // Applies `change` under the registry lock and publishes the result.
  void Update(const std::string& id, const std::function<void(v1::Job&)>& change);
  void AddWaiter(const std::string& id, const std::string& client);

  std::optional<v1::Job> Get(const std::string& id) const;
  // Newest first; state JOB_STATE_UNSPECIFIED lists all.
  std::vector<v1::Job> List(v1::JobState state, size_t limit, bool include_log) const;

  // A stream of job changes. Next() waits for the next event until `deadline`; false when
  // the registry closed or the deadline passed (check closed()).
  class Watcher {
   public:
    bool Next(v1::Job* job, std::chrono::steady_clock::time_point deadline);
    bool closed() const;

   private:
    friend class JobRegistry;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<v1::Job> events_;
    bool closed_ = false;
    uint64_t dropped_ = 0;
  };
  std::shared_ptr<Watcher> Watch(bool include_existing);
  void Unwatch(const std::shared_ptr<Watcher>& watcher);

  // Wakes and ends every watcher (daemon shutdown).
  void Close();

  static bool IsFinished(v1::JobState state);

 private:
  void PublishLocked(const v1::Job& job);
  void TrimLocked();

  const size_t max_finished_;
  mutable std::mutex mu_;
  uint64_t next_seq_ = 1;
  std::map<uint64_t, v1::Job> jobs_;  // by sequence, oldest first
  std::map<std::string, uint64_t> by_id_;
  std::vector<std::shared_ptr<Watcher>> watchers_;
  bool closed_ = false;
};

}  // namespace kiln::server
