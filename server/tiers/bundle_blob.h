// The check every bundle blob passes before it is served, whether it came from a folder
// (--prebuilt) or over HTTP (--artifact-url): its size and its SHA-256 are the manifest's.
#pragma once

#include <string>
#include <string_view>

#include "kiln/v1/bundle.pb.h"

namespace kiln::server {

// "" when `bytes` are the blob `entry` names; else what differs, in words.
std::string BundleBlobProblem(const v1::BundleEntry& entry, std::string_view bytes);

}  // namespace kiln::server
