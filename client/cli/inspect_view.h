// What `kiln inspect` shows of one cache entry, gathered from the daemon (the entry with its
// manifest and compile log, the job that built it) and from this machine's file system (the
// generated-sources folder the manifest names), and how it prints (human or JSON).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/v1/cache.pb.h"
#include "kiln/v1/job.pb.h"

namespace kiln::cli {

struct GeneratedFile {
  std::string name;  // relative to the folder
  uint64_t size_bytes = 0;
  std::string sha256;
  std::string versus_manifest;  // "same", "DIFFERS", "not in the manifest", "missing"
};

struct GeneratedFolder {
  std::string path;
  bool exists = false;
  std::string note;  // why it is not listed, or what to know about it
  std::vector<GeneratedFile> files;
};

struct EntryView {
  v1::CacheEntry entry;
  std::optional<v1::Job> job;
  std::string job_note;  // when there is no job to show: why
  GeneratedFolder generated;
};

// The folder the entry's manifest names, read here: each file's size and SHA-256 against the
// manifest's (a later compile of the same URI rewrites the folder), and the manifest's sources
// that are not there. `local` says whether the daemon is on this machine (a unix socket).
GeneratedFolder ReadGeneratedFolder(const v1::Manifest& manifest, bool local);

// "lineinfo, verbose-log", or "none (optimized, no line info)".
std::string DebugText(const v1::DebugControls& debug);

void PrintEntryView(std::ostream& out, const EntryView& view);
nlohmann::json EntryViewJson(const EntryView& view);

}  // namespace kiln::cli
