// RankEnvironment: what each rank of one launch finds in its environment — its rank, the
// world size, a rendezvous address unique to this launch, and torchrun's variable names.
#pragma once

#include <map>
#include <string>

namespace kiln::launch {

struct LaunchIdentity {
  std::string comm_address;  // "@kiln-launch-<pid>-<random>": Linux abstract namespace
  int master_port = 0;       // a TCP port on 127.0.0.1 that was free a moment ago
};

// A fresh identity for this launch; an empty address when no randomness or port was found,
// with *error saying why.
LaunchIdentity NewLaunchIdentity(std::string* error);

// The variables kiln-launch sets for `rank` (added to, or replacing, the inherited ones).
std::map<std::string, std::string> RankEnvironment(const LaunchIdentity& identity, int rank, int world_size);

}  // namespace kiln::launch
