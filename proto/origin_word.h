// Where a served kernel came from (kiln.v1.Origin) as one lowercase word, for every log line and
// progress line on both sides of the wire: "memory", "disk", "prebuilt", "repository",
// "remote", "compiled" ("unspecified" for anything else).
#pragma once

#include <string>

#include "kiln/v1/kernel.pb.h"

namespace kiln::proto {

std::string OriginWord(v1::Origin origin);

}  // namespace kiln::proto
