// The open-file limit kilnd runs under. Each connection holds a file descriptor; at the usual
// soft limit of 1024 a node's clients exhaust it (issue 15), so kilnd raises the soft limit to
// the hard one at start and says what it got.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::server {

struct OpenFileLimit {
  uint64_t soft = 0;  // after raising
  uint64_t hard = 0;
  std::string problem;  // why raising failed; empty when it worked or was not needed
};

// Raises RLIMIT_NOFILE's soft limit to its hard limit (never lowers it).
OpenFileLimit RaiseOpenFileLimit();

}  // namespace kiln::server
