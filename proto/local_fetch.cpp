#include "proto/local_fetch.h"

#include <poll.h>
#include <sys/socket.h>
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

Io WriteOne(int fd, std::string_view bytes, Deadline deadline) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Io w = WaitFor(fd, POLLOUT, deadline); !w.ok()) return w;
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return {IoOutcome::kClosed, "the peer closed the connection"};
    return {IoOutcome::kFailed, std::string("send: ") + std::strerror(errno)};
  }
  return {};
}

}  // namespace

Io WriteAll(int fd, std::string_view first, std::string_view second, Deadline deadline) {
  if (Io w = WriteOne(fd, first, deadline); !w.ok()) return w;
  return WriteOne(fd, second, deadline);
}

Io ReadExact(int fd, char* out, size_t n, Deadline deadline) {
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
