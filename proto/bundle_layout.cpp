#include "proto/bundle_layout.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <google/protobuf/util/json_util.h>

namespace kiln::proto {
namespace {

bool IsSha256Hex(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

std::string BundleManifestPath(const std::string& dir) { return dir + "/" + kBundleManifestName; }

std::string BundleBlobPath(const std::string& dir, const std::string& sha256) {
  return dir + "/blobs/" + sha256.substr(0, 2) + "/" + sha256;
}

std::string CheckBundleManifest(const v1::BundleManifest& m) {
  if (m.bundle_format() != kBundleFormatVersion)
    return "bundle format " + std::to_string(m.bundle_format()) + " is not the format this Kiln reads (" +
           std::to_string(kBundleFormatVersion) + "); rebuild the bundle with this Kiln's `kiln aot build`";
  if (m.kiln_version().empty()) return "the manifest names no kiln_version";
  if (m.toolchain().nvrtc().empty()) return "the manifest names no toolchain (toolchain.nvrtc is empty)";
  std::set<std::string> keys;
  for (int i = 0; i < m.entries_size(); ++i) {
    const v1::BundleEntry& e = m.entries(i);
    const std::string which = "entry " + std::to_string(i) + (e.uri().empty() ? "" : " (" + e.uri() + ")");
    if (e.op().empty() || e.uri().empty() || e.arch().empty()) return which + " lacks its op, uri or arch";
    if (!IsSha256Hex(e.cache_key()))
      return which + ": cache_key '" + e.cache_key() + "' is not 64 lowercase hex digits";
    if (!IsSha256Hex(e.sha256())) return which + ": sha256 '" + e.sha256() + "' is not 64 lowercase hex digits";
    if (e.size_bytes() == 0) return which + " has size_bytes 0";
    if (!keys.insert(e.cache_key()).second) return which + ": cache_key " + e.cache_key() + " appears twice";
  }
  return "";
}

LoadedBundleManifest ReadBundleManifest(const std::string& dir) {
  LoadedBundleManifest out;
  const std::string path = BundleManifestPath(dir);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.error = dir + ": cannot read " + kBundleManifestName + " (" + strerror(errno) +
                "); a bundle folder holds the manifest.json and blobs/ that `kiln aot build --out` writes";
    return out;
  }
  std::ostringstream text;
  text << in.rdbuf();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), &out.manifest, options);
  if (!parsed.ok()) {
    out.error = path + " is not a bundle manifest: " + std::string(parsed.message());
    return out;
  }
  if (std::string problem = CheckBundleManifest(out.manifest); !problem.empty()) out.error = path + ": " + problem;
  return out;
}

std::string WriteBundleManifest(const std::string& dir, const v1::BundleManifest& manifest) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  auto printed = google::protobuf::util::MessageToJsonString(manifest, &json, options);
  if (!printed.ok()) return "cannot encode the manifest: " + std::string(printed.message());
  const std::string path = BundleManifestPath(dir);
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << json;
    out.flush();
    if (!out) return "cannot write " + temp + ": " + strerror(errno);
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = strerror(errno);
    unlink(temp.c_str());
    return "cannot rename " + temp + " to " + path + ": " + why;
  }
  return "";
}

}  // namespace kiln::proto
