// The two records of one request's trip through KernelEngine: what Prepare derived from the
// request (spec, arch, key), and the in-flight compile that identical requests share.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/artifact_cache.h"
#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"
#include "kiln/v1/kernel.pb.h"
#include "server/engine/artifact.h"
#include "server/engine/clock.h"

namespace kiln::server {

struct PreparedRequest {
  std::shared_ptr<const kernels::TreeSnapshot> tree;  // the tree the key and compile both see
  kernels::JitSpec spec;
  kernels::GpuArch arch;
  std::vector<std::string> extra_options;
  std::vector<std::string> key_options;
  std::vector<std::string> source_sha256;  // of spec.headers then spec.units, as keyed
  bool verbose_log = false;
  std::string key;
  cache::Compatibility compat;
  double spec_ms = 0;
  double key_ms = 0;
};

struct CompileFlight {
  std::string key;
  std::string job_id;
  Clock::time_point submitted;
  Clock::time_point job_deadline;
  std::atomic<bool> abandoned{false};  // timed out: waiters were answered, result is discarded
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::StatusOr<std::shared_ptr<const Artifact>> result = absl::UnknownError("pending");
  v1::Origin origin = v1::ORIGIN_COMPILED;
  v1::Timings timings;  // queue, lock, compile, link, commit
};

}  // namespace kiln::server
