// The checks every bundle entry passes before it is served, whether it came from a folder
// (--prebuilt) or over HTTP (--artifact-url): the entry is the one the request's key asked for
// (the key covers its URI and arch, so a manifest that disagrees with itself is not trusted),
// and its blob's size and SHA-256 are the manifest's.
#pragma once

#include <string>
#include <string_view>

#include "kiln/v1/bundle.pb.h"

namespace kiln::server {

// "" when `entry` names the request's `uri` and `arch`; else "the entry of key <16 hex> says
// <uri> for <arch>, the request is <uri> for <arch>".
std::string BundleEntryMismatch(const v1::BundleEntry& entry, const std::string& key, const std::string& uri,
                                const std::string& arch);

// "" when `bytes` are the blob `entry` names; else what differs, in words.
std::string BundleBlobProblem(const v1::BundleEntry& entry, std::string_view bytes);

}  // namespace kiln::server
