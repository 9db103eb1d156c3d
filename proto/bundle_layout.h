// The layout of a prebuilt (AOT) bundle folder (proto/kiln/v1/bundle.proto says what it holds),
// for the writer (`kiln aot build`) and the reader (`kilnd --prebuilt`) alike: where the manifest
// and each blob live, the format version, and the checks a manifest must pass before any of its
// entries is trusted.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/v1/bundle.pb.h"

namespace kiln::proto {

// Bumped whenever the folder layout or the meaning of a manifest field changes; a reader refuses
// a bundle of another format (it may not know how to read it).
inline constexpr uint32_t kBundleFormatVersion = 1;
inline constexpr const char* kBundleManifestName = "manifest.json";
// The artifact repository's index (kiln.v1.ArtifactIndex) at the root of the tree.
inline constexpr uint32_t kArtifactIndexFormatVersion = 1;
inline constexpr const char* kArtifactIndexName = "index.json";

std::string BundleManifestPath(const std::string& dir);
// <dir>/blobs/<first two digits>/<sha256>
std::string BundleBlobPath(const std::string& dir, const std::string& sha256);

// "" when the manifest can be trusted to describe blobs: its format is kBundleFormatVersion,
// it names a Kiln version and a toolchain, and every entry has an op, a URI, an arch, a cache
// key and a SHA-256 of 64 lowercase hex digits, a size above zero, and a key no other entry has.
// Else what is wrong, naming the entry.
std::string CheckBundleManifest(const v1::BundleManifest& manifest);

struct LoadedBundleManifest {
  v1::BundleManifest manifest;
  std::string error;  // empty: read and checked; else "<dir>: <what is wrong>"
};
// Reads <dir>/manifest.json (proto3 JSON; unknown fields are an error: they would be a newer
// format's) and checks it.
LoadedBundleManifest ReadBundleManifest(const std::string& dir);
// The same for a manifest's text read from elsewhere (`where` names it in the error: a URL).
LoadedBundleManifest ParseBundleManifest(const std::string& text, const std::string& where);

// "" when the index can be used: its format is kArtifactIndexFormatVersion and every bundle name
// is a plain folder name ([A-Za-z0-9._-], not "." or "..") listed once. Else what is wrong.
std::string CheckArtifactIndex(const v1::ArtifactIndex& index);
struct LoadedArtifactIndex {
  v1::ArtifactIndex index;
  std::string error;  // "<where>: <what is wrong>"
};
LoadedArtifactIndex ParseArtifactIndex(const std::string& text, const std::string& where);
// Writes <dir>/index.json (temp file and rename).
std::string WriteArtifactIndex(const std::string& dir, const v1::ArtifactIndex& index);

// Writes <dir>/manifest.json through a temp file and a rename, so a reader sees the old
// manifest or the whole new one. "" or what failed.
std::string WriteBundleManifest(const std::string& dir, const v1::BundleManifest& manifest);

}  // namespace kiln::proto
