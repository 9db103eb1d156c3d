// What of a compile log the daemon keeps (in the job, the cache row and the replies): its head
// and its tail, with one line between them saying what was left out.
//
// Why: NVRTC prints, under each warning, the source line it is about. A line that expands to
// thousands of warnings (a macro that declares many unused variables) is printed once per
// warning, so the log grows with the square of the warning count: issue 15 saw 2,000 warnings
// make a 57 MB log, stored in an index row and sent whole by GetJob and GetEntry, past gRPC's
// message limits. The first errors and the last lines (ptxas' report, nvJitLink's) are what
// people read; the middle of such a log repeats itself.
#pragma once

#include <cstddef>
#include <string>

namespace kiln::server {

inline constexpr size_t kCompileLogHeadBytes = 64 << 10;
inline constexpr size_t kCompileLogTailBytes = 64 << 10;

// `log` when it has at most head + tail bytes; else its first lines up to `head` bytes, a line
// "[... kiln left out N bytes (M lines) of this compile log here ...]" and its last lines up
// to `tail` bytes (cut inside a line only when one line alone is longer than that).
std::string BoundedCompileLog(const std::string& log, size_t head = kCompileLogHeadBytes,
                              size_t tail = kCompileLogTailBytes);

}  // namespace kiln::server
