// Frame: the rendezvous wire format — one length-prefixed message over a unix stream socket,
// optionally carrying file descriptors (SCM_RIGHTS) — and how to send and receive one.
//
// NOTES: on a stream socket the kernel attaches passed fds to a byte, not to a message. We
// send a frame's fds with its first byte and read every frame with exact lengths, so the fds
// always come back while that frame's header is being read; a reader collects whatever fds
// arrive during a frame and checks the count against the header.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/comm/unique_fd.h"

namespace kiln::client::comm {

inline constexpr uint32_t kFrameMagic = 0x4b4c4e52;  // "KLNR"
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kMaxFramePayload = size_t{4} << 20;  // AllGather payload limit per rank
inline constexpr size_t kMaxFrameFds = 16;                   // AllGather fd limit per rank
// Error texts ride in frames too; they are short.
inline constexpr size_t kMaxFrameBody = kMaxFramePayload + 4096;

enum class FrameType : uint16_t {
  kHello = 1,    // rank -> rank 0: rank, aux = world size
  kWelcome = 2,  // rank 0 -> rank: every rank has joined
  kReject = 3,   // rank 0 -> rank: the group cannot form; body = why
  kContrib = 4,  // rank -> rank 0: a collective's contribution; aux = collective kind
  kPart = 5,     // rank 0 -> rank: one rank's contribution, relayed; rank = whose
  kDone = 6,     // rank 0 -> rank: a barrier is complete
  kError = 7,    // rank 0 -> rank: the group's collective failed; aux = StatusCode, body = why
  kLost = 8,     // rank 0 -> rank: a peer was lost; rank = which, body = why
  kLeave = 9,    // either way: a clean Close()
};

struct Frame {
  FrameType type = FrameType::kHello;
  uint32_t rank = 0;
  uint32_t aux = 0;
  uint64_t seq = 0;
  std::string body;
  std::vector<UniqueFd> fds;
};

using Clock = std::chrono::steady_clock;

// Sends one frame on a non-blocking socket, waiting for room until `deadline`. `abort_fd`,
// when >= 0, stops the wait as soon as it becomes readable. Never raises SIGPIPE.
// Returns 0 or an errno: ETIMEDOUT, ECANCELED (aborted), EPIPE / ECONNRESET (peer gone).
// *torn says whether part of the frame went out before a failure (the stream is then
// unusable).
int SendFrame(int sock, FrameType type, uint32_t rank, uint32_t aux, uint64_t seq, std::string_view body,
              std::span<const int> fds, Clock::time_point deadline, int abort_fd, bool* torn);

// Assembles frames from a non-blocking socket across partial reads.
class FrameReader {
 public:
  enum class Result { kFrame, kWouldBlock, kClosed, kError };

  // Reads what the socket has without blocking. kFrame: *out holds a complete frame.
  // kClosed: end of stream or connection reset. kError: *error says what was malformed.
  Result Read(int sock, Frame* out, std::string* error);
  bool mid_frame() const { return got_ > 0 || !fds_.empty(); }

 private:
  Result ReadSome(int sock, char* dst, size_t len, size_t* got, std::string* error);

  unsigned char header_[32] = {};
  size_t got_ = 0;  // bytes of header + body received so far
  Frame frame_;
  uint16_t expected_fds_ = 0;
  uint64_t body_length_ = 0;
  std::vector<UniqueFd> fds_;
};

}  // namespace kiln::client::comm
