#include "client/core/loader/programmatic_launch.h"

namespace kiln::client {

BinarySwitch& OpProgrammaticLaunchSwitch() {
  static BinarySwitch s("KILN_PDL", true,
                        "the norm, activation, RoPE, KV append, decode and sampling ops launch in plain stream order "
                        "in this process (docs/client.md)");
  return s;
}

}  // namespace kiln::client
