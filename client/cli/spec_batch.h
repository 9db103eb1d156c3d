// What `kiln warm` and `kiln aot build` share: a spec list's targets (proto/spec_list.h) fetched
// through the daemon with at most --jobs requests in flight, with a progress display (a bar on
// stderr when it is a terminal, else one JSON line per spec on stdout) and a summary.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "client/cli/command.h"
#include "proto/spec_list.h"

namespace kiln::cli {

// The options both commands take: --arch, --jobs.
std::vector<OptionSpec> SpecBatchOptions();

// The --arch list ("sm_80 sm_90a", repeatable, split at spaces and commas); empty when none.
std::vector<std::string> ArchListOption(const Invocation& invocation);

// --jobs (1..64, default 4).
int JobsOption(const Invocation& invocation);

// The spec list at `path` expanded over `archs` (a UsageError naming the line when it is bad).
struct LoadedSpecs {
  proto::ParsedSpecList list;
  std::vector<proto::SpecTarget> targets;  // point into list.entries
};
LoadedSpecs LoadSpecTargets(const std::string& path, const std::vector<std::string>& archs);

struct SpecResult {
  const proto::SpecTarget* target = nullptr;
  bool ok = false;
  std::string error;            // when !ok
  v1::GetKernelResponse reply;  // when ok, less the cubin bytes
  std::string cubin;            // when ok: SHA-256 verified
  double ms = 0;
};

struct SpecBatchSummary {
  int total = 0;
  int failed = 0;
  std::map<std::string, int> by_origin;  // proto::OriginWord: "compiled", "memory", ...
  std::string Text() const;              // "40 specs: 32 compiled, 8 disk; 0 failed"
};

// Fetches every target with `jobs` workers; `on_result` runs for each one fetched, on the worker
// that fetched it (so several at once: it guards what it shares), before the display counts
// it; an exception from it fails that target with its message.
SpecBatchSummary RunSpecBatch(Invocation& invocation, const std::vector<proto::SpecTarget>& targets, int jobs,
                              const std::function<void(const SpecResult&)>& on_result);

}  // namespace kiln::cli
