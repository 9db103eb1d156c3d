#include "client/ranks/rank_environment.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kiln::launch {
namespace {

// Binding port 0 lets the kernel pick; the port is free again once we close it. Another
// process may take it before torch.distributed binds it: the same race torchrun accepts.
int FreeLoopbackPort(std::string* error) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket(AF_INET) failed: ") + std::strerror(errno);
    return 0;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  } else {
    *error = std::string("cannot find a free TCP port on 127.0.0.1: ") + std::strerror(errno);
  }
  ::close(fd);
  return port;
}

}  // namespace

LaunchIdentity NewLaunchIdentity(std::string* error) {
  LaunchIdentity id;
  unsigned char random[8];
  if (::getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    *error = std::string("getrandom failed: ") + std::strerror(errno);
    return id;
  }
  char hex[sizeof(random) * 2 + 1];
  for (size_t i = 0; i < sizeof(random); ++i) std::snprintf(hex + 2 * i, 3, "%02x", random[i]);
  id.master_port = FreeLoopbackPort(error);
  if (id.master_port == 0) return id;
  id.comm_address = "@kiln-launch-" + std::to_string(::getpid()) + "-" + hex;
  return id;
}

std::map<std::string, std::string> RankEnvironment(const LaunchIdentity& identity, int rank, int world_size) {
  const std::string r = std::to_string(rank);
  const std::string n = std::to_string(world_size);
  // One node: the local rank is the rank, the local world is the world.
  return {
      {"KILN_RANK", r},
      {"KILN_WORLD_SIZE", n},
      {"KILN_LOCAL_RANK", r},
      {"KILN_LOCAL_WORLD_SIZE", n},
      {"KILN_COMM_ADDRESS", identity.comm_address},
      {"RANK", r},
      {"WORLD_SIZE", n},
      {"LOCAL_RANK", r},
      {"LOCAL_WORLD_SIZE", n},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(identity.master_port)},
  };
}

}  // namespace kiln::launch
