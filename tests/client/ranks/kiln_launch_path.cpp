#include "tests/client/ranks/kiln_launch_path.h"

#include <cstdlib>

namespace kiln::comm::testing {

std::string KilnLaunchPath() {
  const char* v = std::getenv("KILN_TEST_LAUNCH");
  if (v != nullptr && v[0] != '\0') return v;
  return std::string(KILN_TEST_BINARY_DIR) + "/client/kiln-launch";
}

}  // namespace kiln::comm::testing
