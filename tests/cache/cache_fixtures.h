// Cache fixtures: sample entries, deterministic cubin bytes, and the file damage tests inflict
// (a flipped byte, an old modification time).
#pragma once

#include <chrono>
#include <string>

#include "cache/artifact_cache.h"
#include "cache/cache_index.h"

namespace kiln::cache::testing {

// A 64-hex key derived from `name`.
std::string KeyFor(const std::string& name);
// Bytes that stand in for a cubin, a function of `seed` (size ≈ `size`).
std::string FakeCubin(const std::string& seed, size_t size = 256);

// A complete record (every field set, so round trips check them all); sha256/size unset.
EntryRecord MakeRecord(const std::string& key, const std::string& uri = "rmsnorm_bf16_h4096",
                       const std::string& op = "rmsnorm", const std::string& arch = "sm_90a");
// An EntryFilter (op exact, uri prefix, arch exact, any of keys); "" / {} match anything.
EntryFilter Filter(std::string op, std::string uri_prefix, std::string arch, std::vector<std::string> keys = {});

// What a request for `record` expects.
Compatibility CompatibilityOf(const EntryRecord& record);

// Flips one bit of the byte at `offset` (making a read-only file writable first).
void FlipByte(const std::string& path, size_t offset = 0);
// Sets the modification time `age` into the past.
void MakeOld(const std::string& path, std::chrono::seconds age);

}  // namespace kiln::cache::testing
