// The same-node fetch: GetKernel without gRPC, on kilnd's own unix socket (issue 15: a gRPC
// round trip alone cost ~156 µs on the H200 host, above the 150 µs budget of a whole warm
// fetch). A client opens an ordinary connection to the socket and sends kLocalFetchMagic first;
// kilnd's accept loop sees those bytes (a gRPC client's first bytes are HTTP/2's preface) and
// serves the connection itself, one request at a time:
//
//   request:  u32 length | GetKernelRequest (protobuf)
//   reply:    u32 code | u32 length | GetKernelResponse (code 0) or the error message (UTF-8)
//
// (little-endian; code: the canonical status codes gRPC and absl share). The request and reply
// are kiln.v1's, so the daemon answers exactly as its gRPC GetKernel does. A connection stays
// open for the next request. docs/architecture.md, "The same-node fetch".
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::proto {

inline constexpr std::string_view kLocalFetchMagic = "KILNLF01";
inline constexpr uint32_t kMaxLocalRequestBytes = 8u << 20;  // gRPC's receive limit on kilnd
inline constexpr uint32_t kMaxLocalReplyBytes = 256u << 20;  // and its send limit

using Deadline = std::chrono::steady_clock::time_point;

// The outcome of moving bytes on a non-blocking socket before a deadline.
enum class IoOutcome {
  kOk,
  kClosed,   // the peer closed (at a frame boundary, or in the middle of one)
  kTimeout,  // the deadline passed
  kFailed,   // a socket error (the text says which)
};
struct Io {
  IoOutcome outcome = IoOutcome::kOk;
  std::string error;  // for kFailed / kClosed / kTimeout: what happened
  bool ok() const { return outcome == IoOutcome::kOk; }
};

// Writes every byte of `first` then `second` (one frame: header and body) before `deadline`, in
// one sendmsg where the socket takes it: a frame sent in two pieces can wake the reader twice
// (it reads the header, finds no body yet and sleeps again).
Io WriteAll(int fd, std::string_view first, std::string_view second, Deadline deadline);
// Reads exactly `n` bytes into `out` before `deadline`. kClosed when the peer closed first.
// `spin`: for this long, a read that finds nothing tries again at once instead of sleeping in
// poll (a reader that expects an answer within microseconds saves the wake-up of its thread).
Io ReadExact(int fd, char* out, size_t n, Deadline deadline,
             std::chrono::microseconds spin = std::chrono::microseconds::zero());

// Little-endian u32 in and out of frame headers.
void PutU32(char* out, uint32_t v);
uint32_t GetU32(const char* in);

}  // namespace kiln::proto
