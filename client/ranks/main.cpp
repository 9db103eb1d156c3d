// kiln-launch: starts one process per GPU of this node for a multi-process job (Kiln's
// all-reduce, torch.distributed), gives each its rank, and stops them together.
#include <iostream>
#include <string>
#include <vector>

#include "client/ranks/launch_options.h"
#include "client/ranks/rank_environment.h"
#include "client/ranks/rank_group.h"
#include "kiln/version.h"

int main(int argc, char** argv) {
  using namespace kiln::launch;
  ParsedLaunch parsed = ParseLaunchArguments(std::vector<std::string>(argv + 1, argv + argc));
  if (parsed.options.help) {
    std::cout << LaunchUsage();
    return 0;
  }
  if (parsed.options.version) {
    std::cout << "kiln-launch " << KILN_VERSION_STRING << std::endl;
    return 0;
  }
  if (!parsed.error.empty()) {
    std::cerr << "kiln-launch: " << parsed.error << "\n(see kiln-launch --help)" << std::endl;
    return 2;
  }
  std::string error;
  LaunchIdentity identity = NewLaunchIdentity(&error);
  if (identity.comm_address.empty()) {
    std::cerr << "kiln-launch: " << error << std::endl;
    return kExitLauncherError;
  }
  return RunRankGroup(parsed.options, identity);
}
