#include "proto/bundle_layout.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
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

namespace {

// `text` as proto3 JSON into `message` (a field it does not know is an error: it would be a newer
// format's); "" or "<where> is not <what>: <why>".
std::string ParseJson(const std::string& text, const std::string& where, const char* what,
                      google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto parsed = google::protobuf::util::JsonStringToMessage(text, message, options);
  return parsed.ok() ? "" : where + " is not " + what + ": " + std::string(parsed.message());
}

}  // namespace

LoadedBundleManifest ParseBundleManifest(const std::string& text, const std::string& where) {
  LoadedBundleManifest out;
  out.error = ParseJson(text, where, "a bundle manifest", &out.manifest);
  if (out.error.empty())
    if (std::string problem = CheckBundleManifest(out.manifest); !problem.empty()) out.error = where + ": " + problem;
  return out;
}

LoadedBundleManifest ReadBundleManifest(const std::string& dir) {
  const std::string path = BundleManifestPath(dir);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadedBundleManifest out;
    out.error = dir + ": cannot read " + kBundleManifestName + " (" + strerror(errno) +
                "); a bundle folder holds the manifest.json and blobs/ that `kiln aot build --out` writes";
    return out;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseBundleManifest(text.str(), path);
}

std::string CheckArtifactIndex(const v1::ArtifactIndex& index) {
  if (index.index_format() != kArtifactIndexFormatVersion)
    return "index format " + std::to_string(index.index_format()) + " is not the format this Kiln reads (" +
           std::to_string(kArtifactIndexFormatVersion) + ")";
  std::set<std::string> seen;
  for (const auto& name : index.bundles()) {
    const bool plain = !name.empty() && name != "." && name != ".." &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                       });
    if (!plain) return "bundle name '" + name + "' is not a plain folder name ([A-Za-z0-9._-])";
    if (!seen.insert(name).second) return "bundle '" + name + "' is listed twice";
  }
  return "";
}

LoadedArtifactIndex ParseArtifactIndex(const std::string& text, const std::string& where) {
  LoadedArtifactIndex out;
  out.error = ParseJson(text, where, "an artifact index", &out.index);
  if (out.error.empty())
    if (std::string problem = CheckArtifactIndex(out.index); !problem.empty()) out.error = where + ": " + problem;
  return out;
}

namespace {

// `message` as indented proto3 JSON (proto field names) at `path`, through a temp file and a
// rename.
std::string WriteJsonAtomically(const google::protobuf::Message& message, const std::string& path) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  auto printed = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!printed.ok()) return "cannot encode " + path + ": " + std::string(printed.message());
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

}  // namespace

std::string WriteBundleManifest(const std::string& dir, const v1::BundleManifest& manifest) {
  return WriteJsonAtomically(manifest, BundleManifestPath(dir));
}

std::string WriteArtifactIndex(const std::string& dir, const v1::ArtifactIndex& index) {
  return WriteJsonAtomically(index, dir + "/" + kArtifactIndexName);
}

}  // namespace kiln::proto
