#include "client/comm/frame.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kiln::client::comm {
namespace {

// Header layout (native byte order: both ends are on one machine):
//   0 magic u32 | 4 version u16 | 6 type u16 | 8 rank u32 | 12 aux u32 | 16 seq u64
//   24 body length u32 | 28 fd count u16 | 30 reserved u16
constexpr size_t kHeaderSize = 32;

template <typename T>
void Put(unsigned char* at, T v) {
  std::memcpy(at, &v, sizeof(T));
}
template <typename T>
T Get(const unsigned char* at) {
  T v;
  std::memcpy(&v, at, sizeof(T));
  return v;
}

int MillisUntil(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

}  // namespace

int SendFrame(int sock, FrameType type, uint32_t rank, uint32_t aux, uint64_t seq, std::string_view body,
              std::span<const int> fds, Clock::time_point deadline, int abort_fd, bool* torn) {
  *torn = false;
  if (fds.size() > kMaxFrameFds || body.size() > kMaxFrameBody) return EMSGSIZE;
  unsigned char header[kHeaderSize] = {};
  Put<uint32_t>(header + 0, kFrameMagic);
  Put<uint16_t>(header + 4, kProtocolVersion);
  Put<uint16_t>(header + 6, static_cast<uint16_t>(type));
  Put<uint32_t>(header + 8, rank);
  Put<uint32_t>(header + 12, aux);
  Put<uint64_t>(header + 16, seq);
  Put<uint32_t>(header + 24, static_cast<uint32_t>(body.size()));
  Put<uint16_t>(header + 28, static_cast<uint16_t>(fds.size()));

  const size_t total = kHeaderSize + body.size();
  size_t sent = 0;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
  while (sent < total) {
    iovec iov[2];
    int n_iov = 0;
    if (sent < kHeaderSize) iov[n_iov++] = {header + sent, kHeaderSize - sent};
    size_t body_from = sent > kHeaderSize ? sent - kHeaderSize : 0;
    if (body_from < body.size()) iov[n_iov++] = {const_cast<char*>(body.data()) + body_from, body.size() - body_from};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n_iov;
    if (sent == 0 && !fds.empty()) {
      // The fds ride with the frame's first byte.
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      *torn = sent < total;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    pollfd p[2] = {{sock, POLLOUT, 0}, {abort_fd, POLLIN, 0}};
    int ready = ::poll(p, abort_fd >= 0 ? 2 : 1, MillisUntil(deadline));
    if (ready < 0 && errno != EINTR) return errno;
    if (abort_fd >= 0 && (p[1].revents & POLLIN)) return ECANCELED;
    if (ready == 0 && Clock::now() >= deadline) return ETIMEDOUT;
  }
  *torn = false;
  return 0;
}

FrameReader::Result FrameReader::ReadSome(int sock, char* dst, size_t len, size_t* got, std::string* error) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
  iovec iov{dst, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  // Take ownership of any fds first, whatever else went wrong.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n >= 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds_.emplace_back(fd);
    }
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Result::kWouldBlock;
    if (errno == ECONNRESET || errno == EPIPE) return Result::kClosed;
    *error = std::string("recvmsg failed: ") + std::strerror(errno);
    return Result::kError;
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    *error = "file descriptors passed with a message were dropped (MSG_CTRUNC): this process "
             "may have reached its open-file limit (ulimit -n)";
    return Result::kError;
  }
  if (n == 0) return Result::kClosed;
  *got = static_cast<size_t>(n);
  return Result::kFrame;  // "made progress"
}

FrameReader::Result FrameReader::Read(int sock, Frame* out, std::string* error) {
  while (true) {
    size_t n = 0;
    Result r;
    if (got_ < kHeaderSize) {
      r = ReadSome(sock, reinterpret_cast<char*>(header_) + got_, kHeaderSize - got_, &n, error);
      if (r != Result::kFrame) return r;
      got_ += n;
      if (got_ < kHeaderSize) continue;
      if (Get<uint32_t>(header_) != kFrameMagic) {
        *error = "not a Kiln rendezvous message (bad magic)";
        return Result::kError;
      }
      if (uint16_t v = Get<uint16_t>(header_ + 4); v != kProtocolVersion) {
        *error = "rendezvous protocol version " + std::to_string(v) + ", this process speaks " +
                 std::to_string(kProtocolVersion) + " (mixed Kiln versions?)";
        return Result::kError;
      }
      frame_ = Frame{};
      frame_.type = static_cast<FrameType>(Get<uint16_t>(header_ + 6));
      frame_.rank = Get<uint32_t>(header_ + 8);
      frame_.aux = Get<uint32_t>(header_ + 12);
      frame_.seq = Get<uint64_t>(header_ + 16);
      body_length_ = Get<uint32_t>(header_ + 24);
      expected_fds_ = Get<uint16_t>(header_ + 28);
      if (body_length_ > kMaxFrameBody || expected_fds_ > kMaxFrameFds) {
        *error = "message of " + std::to_string(body_length_) + " bytes with " + std::to_string(expected_fds_) +
                 " fds exceeds the limits";
        return Result::kError;
      }
      frame_.body.resize(body_length_);
    } else {
      size_t body_got = got_ - kHeaderSize;
      r = ReadSome(sock, frame_.body.data() + body_got, body_length_ - body_got, &n, error);
      if (r != Result::kFrame) return r;
      got_ += n;
    }
    if (got_ == kHeaderSize + body_length_) {
      if (fds_.size() != expected_fds_) {
        *error = "message announced " + std::to_string(expected_fds_) + " fds but carried " +
                 std::to_string(fds_.size());
        return Result::kError;
      }
      frame_.fds = std::move(fds_);
      fds_.clear();
      got_ = 0;
      *out = std::move(frame_);
      return Result::kFrame;
    }
  }
}

}  // namespace kiln::client::comm
