// ArtifactRepository: the read-only artifact repository of `kilnd --artifact-url URL`, a static
// tree of prebuilt bundles served by any web server (the layout: proto/kiln/v1/bundle.proto).
// The lookup tier after the local bundles and before a compile.
//
// The index (URL/index.json) and every bundle's manifest are downloaded on first use and again
// after `refresh`; until the first load has finished, lookups wait for it (so a fleet starting
// together does not compile what the repository has). An entry answers only under the
// request's exact cache key; its blob is downloaded (at most `jobs` at a time, one download per
// key however many requests want it), its size and SHA-256 checked, and only then served.
// Every failure (unreachable, 404, truncated, stalled, wrong checksum) is logged, counted, and
// the request goes on to compile; the repository's state is logged once per change, with its
// own logger ("artifacts", --artifact-log-level), separate from API call logging.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/v1/bundle.pb.h"
#include "server/jit/kernel_attributes.h"
#include "server/tiers/http_fetch.h"

namespace spdlog {
class logger;
}

namespace kiln::server {

struct ArtifactRepositoryOptions {
  std::string url;  // http:// or https://, no trailing '/'
  int jobs = 4;     // blob downloads at a time
  int retries = 3;  // per download, after the first attempt
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds backoff{200};  // before the first retry; doubled each time
  std::chrono::seconds refresh{60};        // the index and manifests are read again after this
  bool skip_checksum = false;              // --artifact-insecure-skip-checksum: loud, for debugging only
  std::string log_level = "info";          // the "artifacts" logger's
};

class ArtifactRepository {
 public:
  explicit ArtifactRepository(ArtifactRepositoryOptions options);
  ~ArtifactRepository();

  struct Found {
    std::string url;  // of the blob
    v1::BundleEntry entry;
    std::vector<KernelAttributes> kernels;
    std::shared_ptr<const std::string> cubin;  // its size and SHA-256 verified (unless skip_checksum)
  };
  // The repository's entry of `key`, downloaded and verified; nullopt when it has none or it
  // could not be fetched or verified (logged and counted).
  std::optional<Found> Find(const std::string& key, const std::string& uri, const std::string& arch);

  // "URL: N bundles, M entries (read 12 s ago)" or "URL: unreachable (why); next try in 4 s".
  std::string Describe() const;
  const std::string& url() const { return options_.url; }
  uint64_t rejected() const { return rejected_; }
  uint64_t downloads() const { return downloads_; }

 private:
  struct Entry {
    std::string bundle;
    v1::BundleEntry entry;
  };
  struct Index {
    std::map<std::string, Entry> by_key;
    int bundles = 0;
  };
  struct Download;

  // The current index, loading it when it is missing or stale (see the class comment).
  std::shared_ptr<const Index> CurrentIndex();
  // Downloads the index and every manifest; error text or "".
  std::string LoadIndex(std::shared_ptr<const Index>* out);
  std::optional<Found> Fetch(const std::string& key, const Entry& entry);
  HttpOptions Http() const;

  ArtifactRepositoryOptions options_;
  std::shared_ptr<spdlog::logger> log_;

  mutable std::mutex mu_;
  std::condition_variable loaded_cv_;
  std::shared_ptr<const Index> index_;  // null until the first good load
  bool loading_ = false;
  bool ever_tried_ = false;
  std::chrono::steady_clock::time_point loaded_at_, next_try_;
  std::chrono::milliseconds retry_after_{1000};
  std::string last_error_;                                                // "" while reachable
  std::map<std::string, std::shared_ptr<Download>> downloads_in_flight_;  // by key
  int downloads_running_ = 0;
  std::condition_variable slot_cv_;

  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> downloads_{0};
};

}  // namespace kiln::server
