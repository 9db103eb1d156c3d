#include "server/tiers/artifact_repository.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "proto/bundle_layout.h"
#include "server/rpc/wire_forms.h"
#include "server/tiers/bundle_blob.h"

namespace kiln::server {

// One blob download that several requests for the same key share.
struct ArtifactRepository::Download {
  bool done = false;
  std::optional<Found> result;
};

ArtifactRepository::ArtifactRepository(ArtifactRepositoryOptions options) : options_(std::move(options)) {
  log_ = spdlog::default_logger()->clone("artifacts");
  log_->set_level(spdlog::level::from_str(options_.log_level));
  log_->info("artifact repository {}: {} downloads at a time, {} retries, {} ms timeout; index read on first use",
             options_.url, options_.jobs, options_.retries, options_.timeout.count());
  if (options_.skip_checksum)
    log_->warn("--artifact-insecure-skip-checksum is ON: blobs from {} are served WITHOUT their SHA-256 check. A "
               "temporary debugging aid; never leave it on",
               options_.url);
}

ArtifactRepository::~ArtifactRepository() = default;

HttpOptions ArtifactRepository::Http() const {
  HttpOptions http;
  http.timeout = options_.timeout;
  http.stall_timeout = std::min(options_.timeout, std::chrono::milliseconds(10000));
  http.connect_timeout = std::min(options_.timeout, std::chrono::milliseconds(5000));
  return http;
}

std::string ArtifactRepository::LoadIndex(std::shared_ptr<const Index>* out) {
  const std::string index_url = options_.url + "/" + proto::kArtifactIndexName;
  HttpResult got = HttpGetWithRetries(index_url, Http(), options_.retries, options_.backoff);
  if (!got.ok) return absl::StrCat(index_url, ": ", got.error, " (", got.attempts, " attempts)");
  auto index = proto::ParseArtifactIndex(got.body, index_url);
  if (!index.error.empty()) return index.error;
  auto loaded = std::make_shared<Index>();
  for (const auto& bundle : index.index.bundles()) {
    const std::string manifest_url = absl::StrCat(options_.url, "/", bundle, "/", proto::kBundleManifestName);
    HttpResult m = HttpGetWithRetries(manifest_url, Http(), options_.retries, options_.backoff);
    if (!m.ok) return absl::StrCat(manifest_url, ": ", m.error, " (", m.attempts, " attempts)");
    auto manifest = proto::ParseBundleManifest(m.body, manifest_url);
    if (!manifest.error.empty()) return manifest.error;
    for (const auto& e : manifest.manifest.entries()) loaded->by_key.emplace(e.cache_key(), Entry{bundle, e});
    loaded->bundles++;
  }
  *out = std::move(loaded);
  return "";
}

std::shared_ptr<const ArtifactRepository::Index> ArtifactRepository::CurrentIndex() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const bool stale = !index_ || now - loaded_at_ >= options_.refresh;
  if (!stale || now < next_try_) return index_;
  if (loading_) {
    // Only the first load is waited for; a refresh keeps serving the index it replaces.
    if (!index_ && !ever_tried_) loaded_cv_.wait(lock, [&] { return !loading_; });
    return index_;
  }
  loading_ = true;
  lock.unlock();
  std::shared_ptr<const Index> fresh;
  const std::string error = LoadIndex(&fresh);
  lock.lock();
  loading_ = false;
  ever_tried_ = true;
  if (error.empty()) {
    if (!last_error_.empty() || !index_)
      log_->info("artifact repository {}: reachable: {} bundles, {} entries", options_.url, fresh->bundles,
                 fresh->by_key.size());
    index_ = std::move(fresh);
    loaded_at_ = std::chrono::steady_clock::now();
    last_error_.clear();
    retry_after_ = std::chrono::milliseconds(1000);
  } else {
    if (last_error_.empty())
      log_->warn("artifact repository {}: unreachable or unusable ({}); requests compile here meanwhile; retrying "
                 "with backoff{}",
                 options_.url, error, index_ ? ", keeping the index read before" : "");
    last_error_ = error;
    next_try_ = std::chrono::steady_clock::now() + retry_after_;
    retry_after_ = std::min(retry_after_ * 2, std::chrono::milliseconds(60000));
  }
  loaded_cv_.notify_all();
  return index_;
}

std::optional<ArtifactRepository::Found> ArtifactRepository::Fetch(const std::string& key, const Entry& e) {
  const std::string url = absl::StrCat(options_.url, "/", e.bundle, "/blobs/", e.entry.sha256().substr(0, 2), "/",
                                       e.entry.sha256());
  {
    std::unique_lock<std::mutex> lock(mu_);
    slot_cv_.wait(lock, [&] { return downloads_running_ < options_.jobs; });
    downloads_running_++;
  }
  HttpResult got = HttpGetWithRetries(url, Http(), options_.retries, options_.backoff);
  {
    std::lock_guard<std::mutex> lock(mu_);
    downloads_running_--;
  }
  slot_cv_.notify_one();
  downloads_++;
  auto refuse = [&](const std::string& what) -> std::optional<Found> {
    rejected_++;
    log_->warn("artifact repository: {} for {} (key {}) from {}: {}; not served", e.entry.uri(), e.entry.arch(),
               key.substr(0, 16), url, what);
    return std::nullopt;
  };
  if (!got.ok) return refuse(absl::StrCat(got.error, " after ", got.attempts, " attempts"));
  if (std::string problem = BundleBlobProblem(e.entry, got.body); !problem.empty()) {
    if (!options_.skip_checksum) return refuse(problem);
    log_->warn("--artifact-insecure-skip-checksum: serving {} from {} although {}", e.entry.uri(), url, problem);
  }
  Found found;
  found.url = url;
  found.entry = e.entry;
  for (const auto& k : e.entry.kernels()) found.kernels.push_back(FromWire(k));
  found.cubin = std::make_shared<const std::string>(std::move(got.body));
  log_->debug("artifact repository: downloaded {} for {} ({} bytes) from {}", e.entry.uri(), e.entry.arch(),
              found.cubin->size(), url);
  return found;
}

std::optional<ArtifactRepository::Found> ArtifactRepository::Find(const std::string& key, const std::string& uri,
                                                                  const std::string& arch) {
  auto index = CurrentIndex();
  if (!index) return std::nullopt;
  auto it = index->by_key.find(key);
  if (it == index->by_key.end()) return std::nullopt;
  if (std::string mismatch = BundleEntryMismatch(it->second.entry, key, uri, arch); !mismatch.empty()) {
    rejected_++;
    log_->warn("artifact repository: {}; not served", mismatch);
    return std::nullopt;
  }
  // One download per key: later requests wait for the first one's result.
  std::shared_ptr<Download> download;
  bool mine = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto& slot = downloads_in_flight_[key];
    if (!slot) {
      slot = std::make_shared<Download>();
      mine = true;
    }
    download = slot;
    if (!mine) {
      loaded_cv_.wait(lock, [&] { return download->done; });
      return download->result;
    }
  }
  std::optional<Found> result = Fetch(key, it->second);
  {
    std::lock_guard<std::mutex> lock(mu_);
    download->result = result;
    download->done = true;
    downloads_in_flight_.erase(key);
  }
  loaded_cv_.notify_all();
  return result;
}

std::string ArtifactRepository::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!last_error_.empty()) return absl::StrCat(options_.url, ": unreachable (", last_error_, ")");
  if (!index_) return absl::StrCat(options_.url, ": not read yet");
  return absl::StrCat(options_.url, ": ", index_->bundles, " bundles, ", index_->by_key.size(), " entries");
}

}  // namespace kiln::server
