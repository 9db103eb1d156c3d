// ArtifactCache: opening the workspace, the lookup/commit path, key locks and hit counting.
// Maintenance (recovery, verification, eviction) is in cache_maintenance.cpp.
#include "cache/artifact_cache.h"

#include <errno.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache/file_io.h"
#include "cache/sha256.h"
#include "kiln_base/status_macros.h"

namespace kiln::cache {
namespace {

absl::Status CheckKey(const std::string& key) {
  bool ok = key.size() >= 2 && key[0] != '.';
  for (char c : key) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("\"", key,
                   "\" is not a cache key: use ComputeCacheKey (keys are [A-Za-z0-9._-], at least 2 "
                   "characters, not starting with '.')"));
}

std::string Quoted(const std::vector<std::string>& list) {
  return absl::StrCat(
      "[",
      absl::StrJoin(list, ", ", [](std::string* out, const std::string& s) { absl::StrAppend(out, "\"", s, "\""); }),
      "]");
}

// Every field where the row differs from what the request expects.
std::vector<std::string> Mismatches(const EntryRecord& r, const Compatibility& e) {
  std::vector<std::string> out;
  auto check = [&](const char* what, const std::string& found, const std::string& expected) {
    if (found != expected) out.push_back(absl::StrCat(what, " is \"", found, "\", expected \"", expected, "\""));
  };
  check("uri", r.uri, e.uri);
  check("arch", r.arch, e.arch);
  if (r.options != e.options)
    out.push_back(absl::StrCat("options are ", Quoted(r.options), ", expected ", Quoted(e.options)));
  if (r.format_version != e.format_version)
    out.push_back(absl::StrCat("format version is ", r.format_version, ", expected ", e.format_version));
  check("kiln version", r.kiln_version, e.kiln_version);
  check("nvrtc version", r.nvrtc_version, e.nvrtc_version);
  check("nvjitlink version", r.nvjitlink_version, e.nvjitlink_version);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ArtifactCache>> ArtifactCache::Open(const CacheOptions& options) {
  if (options.dir.empty())
    return absl::InvalidArgumentError(
        "the cache folder is empty; set the artifact workspace (flag or environment variable)");
  std::unique_ptr<ArtifactCache> cache(new ArtifactCache());
  cache->options_ = options;
  for (const char* sub : {"", "/locks"}) {
    KILN_ABSL_RETURN_IF_ERROR(file_io::MakeDirs(options.dir + sub));
  }
  KILN_ABSL_ASSIGN_OR_RETURN(cache->blobs_, BlobStore::Open(options.dir, options.on_repair));
  cache->sidecars_ = std::make_unique<EntrySidecars>(options.dir, cache->blobs_.get());
  KILN_ABSL_ASSIGN_OR_RETURN(cache->index_, CacheIndex::Open(options.dir + "/index.sqlite"));
  auto recovered = cache->Recover();
  if (!recovered.ok())
    return absl::Status(recovered.status().code(),
                        absl::StrCat("opening cache ", options.dir,
                                     ": start-up recovery failed: ", recovered.status().message()));
  cache->last_recovery_ = *recovered;
  // A limit lowered since the last run acts now, not at the next commit.
  auto evicted = cache->EnforceSizeLimit();
  if (!evicted.ok())
    return absl::Status(evicted.status().code(),
                        absl::StrCat("opening cache ", options.dir,
                                     ": eviction to the size limit failed: ", evicted.status().message()));
  cache->last_recovery_.evicted_over_limit = static_cast<int>(evicted->evicted.size());
  cache->last_recovery_.evicted_bytes = evicted->bytes_freed;
  return cache;
}

ArtifactCache::~ArtifactCache() {
  if (index_) (void)FlushHits();  // nothing to report to at destruction; hits are advisory
}

absl::StatusOr<std::optional<CachedArtifact>> ArtifactCache::Lookup(
    const std::string& key, const Compatibility& expect, const std::function<void(const std::string&)>& on_problem) {
  auto found = index_->Find(key);
  if (!found.ok() && found.status().code() == absl::StatusCode::kDataLoss) {
    // An unreadable row (bad JSON). If removing it works, the index itself is fine: a miss.
    if (index_->Remove(key).ok()) {
      if (on_problem)
        on_problem(absl::StrCat("cache entry ", key, " was not served: ", found.status().message(),
                                "; removed the entry; it will be recompiled"));
      return std::optional<CachedArtifact>();
    }
  }
  if (!found.ok()) return found.status();
  if (!found->has_value()) return std::optional<CachedArtifact>();
  EntryRecord record = std::move(**found);

  if (auto mismatches = Mismatches(record, expect); !mismatches.empty()) {
    DropUnusableEntry(record, absl::StrCat("it does not match the request: ", absl::StrJoin(mismatches, "; ")),
                      /*blob_corrupt=*/false, on_problem);
    return std::optional<CachedArtifact>();
  }
  auto bytes = blobs_->Read(record.sha256);
  if (!bytes.ok()) {
    switch (bytes.status().code()) {
      case absl::StatusCode::kNotFound:
      case absl::StatusCode::kInvalidArgument:  // the row names no valid blob
        DropUnusableEntry(record, std::string(bytes.status().message()), false, on_problem);
        return std::optional<CachedArtifact>();
      case absl::StatusCode::kDataLoss:
        DropUnusableEntry(record, std::string(bytes.status().message()), true, on_problem);
        return std::optional<CachedArtifact>();
      default:
        return absl::Status(bytes.status().code(),
                            absl::StrCat("looking up cache entry ", key, ": ", bytes.status().message()));
    }
  }
  if (bytes->size() != record.size_bytes) {
    DropUnusableEntry(record,
                      absl::StrCat("the index says ", record.size_bytes, " bytes but blob ", record.sha256, " has ",
                                   bytes->size()),
                      false, on_problem);
    return std::optional<CachedArtifact>();
  }
  CachedArtifact artifact;
  artifact.blob_path = blobs_->PathOf(record.sha256);
  artifact.record = std::move(record);
  artifact.cubin = std::make_shared<const std::string>(std::move(*bytes));
  return std::optional<CachedArtifact>(std::move(artifact));
}

void ArtifactCache::DropUnusableEntry(const EntryRecord& record, const std::string& problem, bool blob_corrupt,
                                      const std::function<void(const std::string&)>& on_problem) {
  std::string action;
  auto removed = index_->RemoveIfBlob(
      record.key, record.sha256, [&](const std::string& sha, uint64_t rows_left) -> absl::Status {
        if (!blobs_->Exists(sha)) {
          action = "removed the entry";
          return absl::OkStatus();
        }
        if (!blob_corrupt && rows_left > 0) {
          action = absl::StrCat("removed the entry; kept its blob, which ", rows_left, " other entr",
                                rows_left == 1 ? "y uses" : "ies use");
          return absl::OkStatus();
        }
        auto moved = blobs_->Quarantine(sha, absl::StrCat("entry ", record.key, ": ", problem));
        if (moved.ok()) {
          quarantined_.fetch_add(1);
          action = absl::StrCat("removed the entry and quarantined its blob to ", *moved);
        } else {
          action = absl::StrCat("removed the entry; could not quarantine its blob (", moved.status().message(), ")");
        }
        return absl::OkStatus();  // the row goes even when the blob could not be moved
      });
  if (!removed.ok()) {
    action = absl::StrCat("could not remove the entry (", removed.status().message(),
                          "); the recompiled entry will replace it");
  } else if (*removed) {
    (void)sidecars_->Remove(record.key);  // a leftover is removed by the next Recover
  } else {
    action = "another process already replaced or removed the entry";
  }
  if (on_problem) {
    on_problem(absl::StrCat("cache entry ", record.key, " (uri \"", record.uri, "\", arch ", record.arch,
                            ") was not served: ", problem, "; ", action, "; it will be recompiled"));
  }
}

absl::StatusOr<FileLock> ArtifactCache::LockKey(const std::string& key, std::chrono::milliseconds timeout) {
  KILN_ABSL_RETURN_IF_ERROR(CheckKey(key));
  const std::string dir = absl::StrCat(options_.dir, "/locks/", key.substr(0, 2));
  int made = ::mkdir(dir.c_str(), 0755);
  if (made != 0 && errno == ENOENT) {  // locks/ itself is gone: recreate it, then try again
    KILN_ABSL_RETURN_IF_ERROR(blobs_->Recreate("locks"));
    made = ::mkdir(dir.c_str(), 0755);
  }
  if (made != 0 && errno != EEXIST)
    return file_io::ErrnoStatus(errno, absl::StrCat("create lock folder ", dir),
                                "check that the cache folder is writable");
  return FileLock::Acquire(absl::StrCat(dir, "/", key, ".lock"), timeout);
}

absl::StatusOr<EntryRecord> ArtifactCache::Commit(EntryRecord record, std::string_view cubin) {
  KILN_ABSL_RETURN_IF_ERROR(CheckKey(record.key));
  auto sha = blobs_->Put(cubin);
  if (!sha.ok())
    return absl::Status(sha.status().code(),
                        absl::StrCat("committing cache entry ", record.key, ": ", sha.status().message()));
  record.sha256 = *sha;
  record.size_bytes = cubin.size();
  record.created_unix_ms = file_io::NowUnixMs();
  record.last_used_unix_ms = record.created_unix_ms;
  // The sidecar before the row: every indexed entry can be rebuilt when the index is lost.
  if (auto written = sidecars_->Write(record); !written.ok())
    return absl::Status(written.code(), absl::StrCat("committing cache entry ", record.key, ": ", written.message()));
  KILN_ABSL_RETURN_IF_ERROR(index_->Upsert(
      record,
      // A remover in another process may have deleted this blob as unreferenced between Put
      // and now; inside the write transaction nobody can, so re-create it here.
      [&]() -> absl::Status {
        if (blobs_->Exists(record.sha256)) return absl::OkStatus();
        return blobs_->Put(cubin).status();
      },
      [&](const std::string& old_sha, uint64_t rows_left) -> absl::Status {
        return rows_left == 0 ? blobs_->Remove(old_sha) : absl::OkStatus();
      }));
  if (options_.evict_in_background) {
    {
      std::lock_guard<std::mutex> lock(due_mu_);
      due_eviction_ = record.key;
    }
    return record;
  }
  // NOTES: eviction errors (a busy index) do not undo a stored entry; the next commit retries.
  (void)EnforceSizeLimit(record.key);
  return record;
}

std::optional<std::string> ArtifactCache::TakeDueEviction() {
  std::lock_guard<std::mutex> lock(due_mu_);
  std::optional<std::string> due;
  due.swap(due_eviction_);
  return due;
}

void ArtifactCache::RecordHit(const std::string& key) {
  const int64_t now = file_io::NowUnixMs();
  std::lock_guard<std::mutex> lock(hits_mu_);
  auto& hit = pending_hits_[key];
  hit.first += 1;
  hit.second = std::max(hit.second, now);
}

absl::Status ArtifactCache::FlushHits() {
  std::map<std::string, std::pair<uint64_t, int64_t>> hits;
  {
    std::lock_guard<std::mutex> lock(hits_mu_);
    hits.swap(pending_hits_);
  }
  if (hits.empty()) return absl::OkStatus();
  absl::Status status = index_->AddHits(hits);
  if (!status.ok()) {
    // Keep the counts for the next flush rather than losing them.
    std::lock_guard<std::mutex> lock(hits_mu_);
    for (const auto& [key, hit] : hits) {
      auto& pending = pending_hits_[key];
      pending.first += hit.first;
      pending.second = std::max(pending.second, hit.second);
    }
  }
  return status;
}

uint64_t ArtifactCache::evictions() const { return evictions_.load(); }
uint64_t ArtifactCache::quarantined() const { return quarantined_.load(); }

}  // namespace kiln::cache
