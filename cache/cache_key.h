// CacheKey: SHA-256 over a canonical encoding of everything that can change a cubin.
// Canonical: every field is tagged and length-prefixed, maps are sorted, lists keep their
// order; no absolute path ever enters it, so a warm cache stays warm when moved.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kiln::cache {

// Bumped whenever the blob/index layout or the key encoding changes.
// 2: an entry's launch hints are a typed list, one per entry point (launch_json).
inline constexpr uint32_t kCacheFormatVersion = 2;

struct KeySource {
  std::string name;    // name as the compile sees it ("kiln_config.cuh", "rmsnorm.cu")
  std::string sha256;  // of its bytes
};

struct KeyInputs {
  std::string op;  // op family or "source"
  std::string uri;
  std::map<std::string, std::string> params;
  std::vector<KeySource> sources;    // every header and unit of the spec, in spec order
  std::string kernels_tree_digest;   // every header of the kernels tree the compile can include
  std::vector<std::string> options;  // spec options + debug options (not include paths)
  std::vector<std::string> link_options;
  std::vector<std::string> entries;
  std::string arch;                  // the arch compiled for: "sm_90a"
  std::string nvrtc_version;         // "13.0"
  std::string nvjitlink_version;     // "13.0"
  std::string cuda_headers_version;  // CUDA_VERSION of the include folder: "13000"
  std::string kiln_version;          // VERSION
  uint32_t format_version = kCacheFormatVersion;
};

// The exact bytes that are hashed (exposed for tests and for the manifest). A readable text:
// one line per field, "<tag> <length>:<bytes>", lists and maps as "<tag> <count>" followed by
// one length-prefixed line per item (maps in key order). Tags are fixed, every variable part
// carries its length, so two different inputs never encode to the same bytes.
std::string CanonicalEncoding(const KeyInputs& inputs);

// Lowercase hex SHA-256 of CanonicalEncoding(inputs).
std::string ComputeCacheKey(const KeyInputs& inputs);

// INVALID_ARGUMENT when the inputs cannot make a portable key: a missing op, URI or arch, a
// source without a name or whose hash is not 64 lowercase hex digits, or an absolute path in
// a source name or an option (a moved warm cache would miss on every entry).
absl::Status ValidateKeyInputs(const KeyInputs& inputs);

}  // namespace kiln::cache
