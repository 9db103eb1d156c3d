#include "server/rpc/cache_service.h"

#include "server/rpc/wire_forms.h"

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "cache/sha256.h"
#include "proto/input_limits.h"
#include "server/engine/clock.h"
#include "server/engine/debug_controls.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/request_limits.h"

namespace kiln::server {
namespace {

// INVALID_ARGUMENT when a string of the request is past its limit (proto/input_limits.h).
template <typename Request>
grpc::Status CheckLengths(const Request& request) {
  std::string problem = RequestLengthProblem(request);
  if (problem.empty()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, problem);
}

void SetMillis(google::protobuf::Timestamp* ts, int64_t unix_ms) {
  ts->set_seconds(unix_ms / 1000);
  ts->set_nanos(int32_t((unix_ms % 1000) * 1000000));
}

}  // namespace

void EntryToProto(const cache::EntryRecord& r, const std::string& blob_path, v1::CacheEntry* out) {
  out->set_cache_key(r.key);
  out->set_uri(r.uri);
  out->set_op(r.op);
  for (const auto& [k, v] : r.params) (*out->mutable_params())[k] = v;
  out->set_arch(r.arch);
  out->set_sha256(r.sha256);
  out->set_size_bytes(r.size_bytes);
  for (const auto& o : r.options) out->add_options(o);
  out->set_format_version(r.format_version);
  out->set_kiln_version(r.kiln_version);
  out->set_nvrtc_version(r.nvrtc_version);
  out->set_nvjitlink_version(r.nvjitlink_version);
  SetMillis(out->mutable_created(), r.created_unix_ms);
  SetMillis(out->mutable_last_used(), r.last_used_unix_ms);
  out->set_hit_count(r.hit_count);
  out->set_compile_ms(r.compile_ms);
  for (const auto& k : KernelsFromJson(r.kernels_json)) ToWire(k, out->add_kernels());
  out->set_job_id(r.job_id);
  out->set_blob_path(blob_path);
  ToWire(LaunchFromJson(r.launch_json), out->mutable_launch());
  *out->mutable_debug() = DebugControlsOf(r.options);
  out->set_cuda_headers_version(r.cuda_headers_version);
  // The heavy fields are only read by GetEntry (a listing selects them as empty strings).
  if (!r.manifest_json.empty()) {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;  // a row written by a newer kilnd sharing the cache
    auto parsed = google::protobuf::util::JsonStringToMessage(r.manifest_json, out->mutable_manifest(), options);
    if (!parsed.ok()) {
      out->clear_manifest();
      spdlog::warn("cache entry {}: its stored manifest is unreadable ({}); GetEntry leaves it out", r.key,
                   std::string(parsed.message()));
    }
  }
  out->set_compile_log(r.compile_log);
}

grpc::Status CacheServiceImpl::RequireCache() const {
  if (engine_->cache() != nullptr) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "this daemon runs with the cache disabled (--no-cache / KILN_NO_CACHE); it stores nothing");
}

grpc::Status CacheServiceImpl::ListEntries(grpc::ServerContext*, const v1::ListEntriesRequest* request,
                                           v1::ListEntriesResponse* response) {
  if (auto s = RequireCache(); !s.ok()) return s;
  if (auto s = CheckLengths(*request); !s.ok()) return s;
  if (request->page_size() < 0 || request->page_size() > 1000)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("page_size ", request->page_size(), " must be from 0 (default 100) to 1000"));
  cache::EntryFilter filter{request->op(), request->uri_prefix(), request->arch(), {}};
  auto* cache = engine_->cache();
  auto page = cache->index().List(filter, request->page_size() == 0 ? 100 : request->page_size(),
                                  request->page_token());
  if (!page.ok()) return ToGrpc(page.status());
  for (const auto& r : page->entries) EntryToProto(r, cache->blobs().PathOf(r.sha256), response->add_entries());
  response->set_next_page_token(page->next_page_token);
  response->set_total_matching(page->total_matching);
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::GetEntry(grpc::ServerContext*, const v1::GetEntryRequest* request,
                                        v1::CacheEntry* response) {
  if (auto s = RequireCache(); !s.ok()) return s;
  if (auto s = CheckLengths(*request); !s.ok()) return s;
  const std::string& key = request->cache_key();
  if (key.size() < 8 || key.size() > 64 || !cache::IsLowerHex(key))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("cache_key ", proto::QuoteInput(key),
                                     " must be a key or a prefix of one: 8 to 64 lowercase hex digits"));
  auto* cache = engine_->cache();
  auto matches = cache->index().FindByPrefix(key, 2);
  if (!matches.ok()) return ToGrpc(matches.status());
  if (matches->empty())
    return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no cache entry has a key starting with ", key));
  if (matches->size() > 1)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("several entries have keys starting with ", key, "; give more digits"));
  EntryToProto(matches->front(), cache->blobs().PathOf(matches->front().sha256), response);
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::EvictEntries(grpc::ServerContext*, const v1::EvictEntriesRequest* request,
                                            v1::EvictEntriesResponse* response) {
  if (auto s = RequireCache(); !s.ok()) return s;
  if (auto s = CheckLengths(*request); !s.ok()) return s;
  cache::EntryFilter filter{request->op(),
                            request->uri_prefix(),
                            request->arch(),
                            {request->cache_keys().begin(), request->cache_keys().end()}};
  bool has_filter = !filter.op.empty() || !filter.uri_prefix.empty() || !filter.arch.empty() || !filter.keys.empty();
  if (!has_filter && !request->all())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "name what to evict (cache_keys, op, uri_prefix or arch), or set all: true to empty the cache");
  if (has_filter && request->all())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "all: true cannot be combined with a filter");
  for (const auto& k : filter.keys)
    if (!cache::IsSha256Hex(k))
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("cache_keys must be full keys (64 lowercase hex digits); got ",
                                       proto::QuoteInput(k)));
  auto report = engine_->cache()->Evict(filter, request->dry_run());
  if (!report.ok()) return ToGrpc(report.status());
  for (const auto& key : report->evicted) {
    response->add_evicted(key);
    if (!request->dry_run()) engine_->ForgetInMemory(key);
  }
  response->set_bytes_freed(report->bytes_freed);
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::Verify(grpc::ServerContext*, const v1::VerifyRequest*, v1::VerifyResponse* response) {
  if (auto s = RequireCache(); !s.ok()) return s;
  auto t = Clock::now();
  auto report = engine_->cache()->Verify();
  if (!report.ok()) return ToGrpc(report.status());
  response->set_entries_checked(report->entries_checked);
  response->set_blobs_checked(report->blobs_checked);
  for (const auto& p : report->problems) {
    auto* out = response->add_problems();
    out->set_cache_key(p.key);
    out->set_sha256(p.sha256);
    out->set_problem(p.problem);
    out->set_action(p.action);
    out->set_quarantine_path(p.quarantine_path);
    if (!p.key.empty()) engine_->ForgetInMemory(p.key);
  }
  response->set_elapsed_ms(MsSince(t));
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::GetStats(grpc::ServerContext*, const v1::GetStatsRequest*, v1::CacheStats* response) {
  auto& stats = engine_->stats();
  if (auto* cache = engine_->cache()) {
    auto totals = cache->index().GetTotals();
    if (!totals.ok()) return ToGrpc(totals.status());
    response->set_entries(totals->entries);
    response->set_bytes(totals->bytes);
    response->set_max_bytes(cache->options().max_bytes);
    response->set_evictions(cache->evictions());
    response->set_quarantined(cache->quarantined());
  }
  response->set_memory_entries(engine_->memory().size());
  response->set_memory_hits(stats.memory_hits);
  response->set_disk_hits(stats.disk_hits);
  response->set_misses(stats.misses);
  response->set_compiles(stats.compiles);
  response->set_compile_failures(stats.compile_failures);
  auto latency = stats.HitLatency();
  response->set_hit_latency_p50_us(latency.p50_us);
  response->set_hit_latency_p99_us(latency.p99_us);
  response->set_cache_dir(engine_->options().cache_dir);
  response->set_jit_enabled(!engine_->options().disable_jit);
  response->set_cache_enabled(!engine_->options().no_cache);
  response->set_prebuilt_hits(stats.prebuilt_hits);
  response->set_repository_hits(stats.repository_hits);
  response->set_offline(engine_->options().offline);
  if (const auto* repository = engine_->repository()) {
    response->set_repository_rejected(repository->rejected());
    response->set_repository(repository->Describe());
  }
  response->set_remote_hits(stats.remote_hits);
  if (const auto* remote = engine_->remote()) {
    response->set_remote_rejected(remote->rejected());
    response->set_remote_published(remote->published());
    response->set_remote_publish_dropped(remote->publish_dropped());
    response->set_remote_lease_waits(remote->lease_waits());
    response->set_remote_cache(remote->Describe());
  }
  if (const auto* prebuilt = engine_->prebuilt()) {
    response->set_prebuilt_rejected(prebuilt->rejected());
    for (const auto& dir : prebuilt->dirs()) response->add_prebuilt_bundles(dir);
  }
  return grpc::Status::OK;
}

}  // namespace kiln::server
