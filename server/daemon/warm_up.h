// WarmUp: `kilnd --warm LIST`. Every spec of a spec list (proto/spec_list.h) is asked of the
// engine in the background as soon as the daemon serves, as a client would ask for it, so it
// goes through every tier (memory, cache, prebuilt bundles) and compiles only what none has.
// Its compile jobs show in JobService like any other (client "kilnd --warm"); each spec's
// outcome is one log line and the end a summary (what came from where, what failed and why).
// Clients are served meanwhile; a stop (SIGTERM) ends it between specs.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "proto/spec_list.h"
#include "server/engine/kernel_engine.h"

namespace kiln::server {

class WarmUp {
 public:
  // Starts `threads` workers over every (entry, arch) of `entries`: `archs` when given (the
  // daemon's --arch list), else each entry's @ARCH targets (LoadDaemonConfig checked that each
  // entry has one).
  WarmUp(KernelEngine* engine, std::string list, std::vector<proto::SpecListEntry> entries,
         std::vector<std::string> archs, int threads);
  ~WarmUp();  // Stop()

  // Asks the workers to end after their current spec and waits for them.
  void Stop();

 private:
  void Work();

  KernelEngine* engine_;
  std::string list_;
  std::vector<proto::SpecListEntry> entries_;
  std::vector<proto::SpecTarget> targets_;  // point into entries_
  std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // the counts below
  std::map<std::string, int> by_origin_;
  int failed_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::server
