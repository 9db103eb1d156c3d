#include "server/tiers/bundle_blob.h"

#include "absl/strings/str_cat.h"
#include "cache/sha256.h"

namespace kiln::server {

std::string BundleEntryMismatch(const v1::BundleEntry& entry, const std::string& key, const std::string& uri,
                                const std::string& arch) {
  if (entry.uri() == uri && entry.arch() == arch) return "";
  return absl::StrCat("the entry of key ", key.substr(0, 16), " says ", entry.uri(), " for ", entry.arch(),
                      ", the request is ", uri, " for ", arch);
}

std::string BundleBlobProblem(const v1::BundleEntry& entry, std::string_view bytes) {
  if (bytes.size() != entry.size_bytes())
    return absl::StrCat("its blob has ", bytes.size(), " bytes, the manifest says ", entry.size_bytes());
  const std::string actual = cache::Sha256Hex(bytes);
  if (actual != entry.sha256())
    return absl::StrCat("its blob's SHA-256 is ", actual, ", the manifest says ", entry.sha256());
  return "";
}

}  // namespace kiln::server
