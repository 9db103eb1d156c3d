// The kiln-launch under test: the build tree's, unless KILN_TEST_LAUNCH names another (an
// installed one, a bundle on another machine).
#pragma once

#include <string>

namespace kiln::comm::testing {

std::string KilnLaunchPath();

}  // namespace kiln::comm::testing
