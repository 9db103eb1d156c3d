#include "tests/support/local_fetch_wire.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "proto/local_fetch.h"

namespace kiln::testing {

int ConnectUnixSocket(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return -1;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

LocalFetchReply ExchangeLocalFrame(int fd, std::string_view body, uint32_t claimed_length,
                                   std::chrono::milliseconds within) {
  char header[8];
  proto::PutU32(header, claimed_length);
  const auto deadline = std::chrono::steady_clock::now() + within;
  LocalFetchReply reply;
  if (!proto::WriteAll(fd, std::string_view(header, 4), body, deadline).ok() ||
      !proto::ReadExact(fd, header, 8, deadline).ok()) {
    reply.closed = true;
    return reply;
  }
  reply.code = proto::GetU32(header);
  reply.body.resize(proto::GetU32(header + 4));
  if (!proto::ReadExact(fd, reply.body.data(), reply.body.size(), deadline).ok()) reply.closed = true;
  return reply;
}

LocalFetchReply LocalFetchOnce(const std::string& socket, const v1::GetKernelRequest& request) {
  LocalFetchReply reply;
  reply.closed = true;
  const int fd = ConnectUnixSocket(socket);
  if (fd < 0) return reply;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  if (proto::WriteAll(fd, proto::kLocalFetchMagic, {}, deadline).ok()) {
    const std::string body = request.SerializeAsString();
    reply = ExchangeLocalFrame(fd, body, static_cast<uint32_t>(body.size()));
  }
  ::close(fd);
  return reply;
}

}  // namespace kiln::testing
