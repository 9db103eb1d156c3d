#include "client/core/rpc/client_identity.h"

#include <unistd.h>

#include <fstream>

namespace kiln::client {

std::string DefaultClientId() {
  std::string name;
  std::ifstream comm("/proc/self/comm");
  if (!std::getline(comm, name) || name.empty()) name = "process";
  return name + "[" + std::to_string(getpid()) + "]";
}

}  // namespace kiln::client
