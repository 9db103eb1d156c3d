#include "proto/local_fetch.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kiln::proto {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
Io WaitFor(int fd, short events, Deadline deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && deadline != Deadline::max()) return {IoOutcome::kTimeout, "timed out"};
    int timeout = deadline == Deadline::max() ? -1 : static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return {IoOutcome::kFailed, std::string("poll: ") + std::strerror(errno)};
    if (n > 0) return {};
  }
}

}  // namespace

Io WriteAll(int fd, std::string_view first, std::string_view second, Deadline deadline) {
  iovec parts[2] = {{const_cast<char*>(first.data()), first.size()}, {const_cast<char*>(second.data()), second.size()}};
  iovec* part = parts;
  size_t left = 2;
  while (left > 0 && part->iov_len == 0) ++part, --left;
  while (left > 0) {
    msghdr message{};
    message.msg_iov = part;
    message.msg_iovlen = left;
    ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n > 0) {
      // Drop what was sent: whole parts, then the front of a part sent in part.
      size_t sent = static_cast<size_t>(n);
      while (left > 0 && sent >= part->iov_len) sent -= part->iov_len, ++part, --left;
      if (left > 0) {
        part->iov_base = static_cast<char*>(part->iov_base) + sent;
        part->iov_len -= sent;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Io w = WaitFor(fd, POLLOUT, deadline); !w.ok()) return w;
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return {IoOutcome::kClosed, "the peer closed the connection"};
    return {IoOutcome::kFailed, std::string("sendmsg: ") + std::strerror(errno)};
  }
  return {};
}

Io ReadExact(int fd, char* out, size_t n, Deadline deadline, std::chrono::microseconds spin) {
  const auto spin_until = spin.count() > 0 ? std::chrono::steady_clock::now() + spin : Deadline::min();
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return {IoOutcome::kClosed, "the peer closed the connection"};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (spin_until != Deadline::min() && std::chrono::steady_clock::now() < spin_until) continue;
      if (Io w = WaitFor(fd, POLLIN, deadline); !w.ok()) return w;
      continue;
    }
    if (errno == ECONNRESET) return {IoOutcome::kClosed, "the peer reset the connection"};
    return {IoOutcome::kFailed, std::string("recv: ") + std::strerror(errno)};
  }
  return {};
}

void PutU32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

uint32_t GetU32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

}  // namespace kiln::proto
