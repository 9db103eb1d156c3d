// What the call-diagnostics variables ask for (KILN_LOGLEVEL, KILN_LOGDEST, KILN_DUMP_*): read
// and checked once per process, at the first op call. A bad value never stops the program: it
// gets one warning line on stderr naming the variable, the value, what is accepted and the
// fallback used. docs/diagnostics.md documents every variable.
//
// The op entry points branch on Level() alone: one relaxed load of a process-wide integer, no
// record, no string. It reads -1 until the variables were parsed, which sends the first call
// down the slow path once (Config() parses, then stores the level).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#ifndef KILN_UNLIKELY
#define KILN_UNLIKELY(x) __builtin_expect(!!(x), 0)
#endif

namespace kiln::client::diag {

// The documented levels; the ones between log as the one below (2 as 1, 4 as 3, 6..9 as 5).
inline constexpr int kLevelOff = 0;
inline constexpr int kLevelNames = 1;       // the op's name, before the launch
inline constexpr int kLevelArguments = 3;   // + tensors' metadata, params, kernel, launch config
inline constexpr int kLevelStatistics = 5;  // + min/max/mean/NaN/Inf of each tensor (GPU kernel)
inline constexpr int kLevelDumps = 10;      // + tensors written to KILN_DUMP_DIR
inline constexpr int kMaxLevel = 10;

inline constexpr int64_t kDefaultDumpMaxCount = 1000;
inline constexpr int64_t kDefaultDumpMaxBytes = int64_t{20} << 30;  // 20 GiB

struct DiagConfig {
  int level = kLevelOff;                          // KILN_LOGLEVEL
  std::string dest = "stderr";                    // KILN_LOGDEST: "stderr", "stdout" or a path
  std::string dump_dir;                           // KILN_DUMP_DIR; empty: no dumps
  int64_t dump_max_count = kDefaultDumpMaxCount;  // KILN_DUMP_MAX_COUNT: calls dumped at most
  int64_t dump_max_bytes = kDefaultDumpMaxBytes;  // KILN_DUMP_MAX_BYTES: tensor bytes at most
  std::vector<std::string> include;               // KILN_DUMP_INCLUDE: fnmatch globs; empty: every op
  std::vector<std::string> exclude;               // KILN_DUMP_EXCLUDE: fnmatch globs
  // KILN_DUMP_TEST_PAUSE_MS, a test hook: sleep this long after a call's inputs were dumped
  // and before its launch, so a test can kill the process mid-call. 0: off.
  int64_t test_pause_ms = 0;
};

// The value of an environment variable, or null when unset.
using EnvLookup = std::function<const char*(const char*)>;

// Parses the variables through `env`. Every bad value appends one warning (a full sentence,
// no newline) to `warnings` and keeps that field's default.
DiagConfig ParseDiagConfig(const EnvLookup& env, std::vector<std::string>* warnings);

// The process's configuration, parsed from the environment on first use (its warnings go to
// stderr then, each as one "[kiln] ..." line).
const DiagConfig& Config();

namespace detail {
extern std::atomic<int> g_level;  // -1 until Config() ran; then the effective level
}

// The effective trace level: KILN_LOGLEVEL (at least 1 while an observer is installed,
// call_trace.h), or -1 before the first call parsed the environment. Hot path: one load.
inline int Level() { return detail::g_level.load(std::memory_order_relaxed); }

// "<seq>": a number of bytes with an optional K/M/G suffix (binary: K = 1024), or nothing on
// a malformed or negative value. Exposed for the tests.
bool ParseByteCount(const std::string& text, int64_t* bytes);

}  // namespace kiln::client::diag
