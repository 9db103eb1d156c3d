// kiln cache ls | stats | verify | evict: the daemon's kernel cache (CacheService).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <ostream>

#include "client/cli/command.h"
#include "client/cli/output.h"
#include "client/core/rpc/daemon_connection.h"
#include "kiln/v1/cache.grpc.pb.h"

namespace kiln::cli {
namespace {

int ParseLimit(const std::string& text, const char* option) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1)
    throw UsageError(std::string(option) + " wants a positive integer, got '" + text + "'");
  return value;
}

std::string Short(const std::string& key) { return key.substr(0, 12); }

int RunLs(Invocation& inv) {
  const int limit = inv.Has("--limit") ? ParseLimit(inv.Get("--limit"), "--limit") : 100;
  auto stub = v1::CacheService::NewStub(inv.Connection().channel());
  v1::ListEntriesResponse all;
  v1::ListEntriesRequest request;
  request.set_op(inv.Get("--op"));
  request.set_uri_prefix(inv.Get("--uri-prefix"));
  request.set_arch(inv.Get("--arch"));
  while (all.entries_size() < limit) {
    request.set_page_size(std::min(1000, limit - all.entries_size()));
    grpc::ClientContext context;
    context.set_deadline(inv.Deadline());
    v1::ListEntriesResponse page;
    grpc::Status status = stub->ListEntries(&context, request, &page);
    if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "ListEntries"));
    for (auto& e : *page.mutable_entries()) *all.add_entries() = std::move(e);
    all.set_total_matching(page.total_matching());
    all.set_next_page_token(page.next_page_token());
    if (page.next_page_token().empty() || page.entries_size() == 0) break;
    request.set_page_token(page.next_page_token());
  }
  if (all.entries_size() > limit) all.mutable_entries()->DeleteSubrange(limit, all.entries_size() - limit);
  if (inv.Has("--json")) {
    inv.out << ToJson(all) << std::endl;
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"KEY", "URI", "ARCH", "SIZE", "HITS", "COMPILE", "LAST USED"}};
  for (const auto& e : all.entries())
    rows.push_back({Short(e.cache_key()), e.uri(), e.arch(), HumanBytes(e.size_bytes()), std::to_string(e.hit_count()),
                    HumanMs(e.compile_ms()), HumanTime(e.last_used())});
  if (all.entries_size() > 0) PrintTable(inv.out, rows);
  inv.out << all.entries_size() << " of " << all.total_matching() << " matching entries";
  if (static_cast<uint64_t>(all.entries_size()) < all.total_matching()) inv.out << " (raise --limit to see more)";
  inv.out << std::endl;
  return kExitOk;
}

int RunGet(Invocation& inv) {
  v1::GetEntryRequest request;
  request.set_cache_key(inv.positionals()[0]);
  auto stub = v1::CacheService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::CacheEntry e;
  grpc::Status status = stub->GetEntry(&context, request, &e);
  if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "GetEntry " + request.cache_key()));
  if (inv.Has("--json")) {
    inv.out << ToJson(e) << std::endl;
    return kExitOk;
  }
  std::string options;
  for (const auto& o : e.options()) options += (options.empty() ? "" : " ") + o;
  std::vector<std::vector<std::string>> rows = {
      {"key", e.cache_key()},
      {"uri", e.uri()},
      {"op", e.op() + "  " + MapText(e.params())},
      {"arch", e.arch()},
      {"cubin", HumanBytes(e.size_bytes()) + ", sha256 " + e.sha256()},
      {"blob", e.blob_path()},
      {"options", options.empty() ? "-" : options},
      {"toolchain", "nvrtc " + e.nvrtc_version() + ", nvJitLink " + e.nvjitlink_version() + ", kiln " +
                        e.kiln_version() + ", format " + std::to_string(e.format_version())},
      {"created",
       HumanTime(e.created()) + (e.job_id().empty() ? "" : " by job " + e.job_id()) + " in " + HumanMs(e.compile_ms())},
      {"used", std::to_string(e.hit_count()) + " hits, last " + HumanTime(e.last_used())},
      {"launch", LaunchText(e.launch())},
  };
  for (int i = 0; i < e.kernels_size(); ++i)
    rows.push_back({i == 0 ? "kernels" : "", e.kernels(i).name() + ": " + std::to_string(e.kernels(i).registers()) +
                                                 " registers, " + std::to_string(e.kernels(i).spill_store_bytes()) +
                                                 " B spill stores"});
  PrintTable(inv.out, rows);
  return kExitOk;
}

int RunStats(Invocation& inv) {
  auto stub = v1::CacheService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::CacheStats s;
  grpc::Status status = stub->GetStats(&context, v1::GetStatsRequest(), &s);
  if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "GetStats"));
  if (inv.Has("--json")) {
    inv.out << ToJson(s) << std::endl;
    return kExitOk;
  }
  const uint64_t lookups = s.memory_hits() + s.disk_hits() + s.prebuilt_hits() + s.repository_hits() + s.remote_hits() +
                           s.misses();
  auto percent = [lookups](uint64_t n) {
    return lookups == 0 ? std::string("-") : std::to_string(n * 100 / lookups) + "%";
  };
  std::string bundles;
  for (const auto& b : s.prebuilt_bundles()) bundles += (bundles.empty() ? "" : ", ") + b;
  PrintTable(
      inv.out,
      {{"cache dir", s.cache_dir()},
       {"entries", std::to_string(s.entries()) + " (" + std::to_string(s.memory_entries()) + " in memory)"},
       {"size",
        HumanBytes(s.bytes()) + " of " + (s.max_bytes() ? HumanBytes(s.max_bytes()) : std::string("unlimited"))},
       {"hits", std::to_string(s.memory_hits()) + " memory (" + percent(s.memory_hits()) + "), " +
                    std::to_string(s.disk_hits()) + " disk (" + percent(s.disk_hits()) + "), " +
                    std::to_string(s.prebuilt_hits()) + " prebuilt (" + percent(s.prebuilt_hits()) + "), " +
                    std::to_string(s.repository_hits()) + " repository (" + percent(s.repository_hits()) + "), " +
                    std::to_string(s.remote_hits()) + " remote (" + percent(s.remote_hits()) + "), " +
                    std::to_string(s.misses()) + " misses (" + percent(s.misses()) + ")"},
       {"hit latency",
        "p50 " + HumanMs(s.hit_latency_p50_us() / 1000) + ", p99 " + HumanMs(s.hit_latency_p99_us() / 1000)},
       {"compiles", std::to_string(s.compiles()) + " (" + std::to_string(s.compile_failures()) + " failed)"},
       {"evictions", std::to_string(s.evictions())},
       {"quarantined", std::to_string(s.quarantined())},
       {"prebuilt", bundles.empty() ? "no bundles (--prebuilt)"
                                    : bundles + " (" + std::to_string(s.prebuilt_rejected()) +
                                          " entries refused: blob missing or not matching its SHA-256)"},
       {"repository", s.repository().empty()
                          ? std::string(s.offline() ? "not used: offline (--offline)" : "none (--artifact-url)")
                          : s.repository() + " (" + std::to_string(s.repository_rejected()) + " downloads refused)"},
       {"remote cache", s.remote_cache().empty()
                            ? std::string(s.offline() ? "not used: offline (--offline)" : "none (--remote-cache)")
                            : s.remote_cache() + " (" + std::to_string(s.remote_published()) + " published, " +
                                  std::to_string(s.remote_publish_dropped()) + " not published, " +
                                  std::to_string(s.remote_rejected()) + " values refused, " +
                                  std::to_string(s.remote_lease_waits()) + " waits on another daemon's compile)"},
       {"jit", s.jit_enabled() ? "on" : "OFF (only cached or prebuilt kernels are served)"},
       {"cache", s.cache_enabled() ? "on" : "OFF (every request compiles)"}});
  return kExitOk;
}

int RunVerify(Invocation& inv) {
  auto stub = v1::CacheService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::VerifyResponse r;
  grpc::Status status = stub->Verify(&context, v1::VerifyRequest(), &r);
  if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "Verify"));
  if (inv.Has("--json")) {
    inv.out << ToJson(r) << std::endl;
  } else {
    inv.out << "checked " << r.entries_checked() << " entries and " << r.blobs_checked() << " blobs in "
            << HumanMs(r.elapsed_ms()) << ": ";
    if (r.problems_size() == 0) {
      inv.out << "no problems" << std::endl;
    } else {
      inv.out << r.problems_size() << " problem(s)" << std::endl;
      for (const auto& p : r.problems()) {
        inv.out << "  " << (p.cache_key().empty() ? "blob " + Short(p.sha256()) : Short(p.cache_key())) << ": "
                << p.problem();
        if (!p.action().empty()) inv.out << " → " << p.action();
        if (!p.quarantine_path().empty()) inv.out << " (" << p.quarantine_path() << ")";
        inv.out << "\n";
      }
      inv.out << std::flush;
    }
  }
  return r.problems_size() == 0 ? kExitOk : kExitProblem;
}

int RunEvict(Invocation& inv) {
  v1::EvictEntriesRequest request;
  for (const auto& k : inv.All("--key")) request.add_cache_keys(k);
  request.set_op(inv.Get("--op"));
  request.set_uri_prefix(inv.Get("--uri-prefix"));
  request.set_arch(inv.Get("--arch"));
  request.set_all(inv.Has("--all"));
  request.set_dry_run(inv.Has("--dry-run"));
  const bool filtered = request.cache_keys_size() > 0 || !request.op().empty() || !request.uri_prefix().empty() ||
                        !request.arch().empty();
  if (!filtered && !request.all())
    throw UsageError("say what to evict: --key K, --op, --uri-prefix, --arch, "
                     "or --all");
  if (filtered && request.all()) throw UsageError("--all cannot be combined with filters");
  auto stub = v1::CacheService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::EvictEntriesResponse r;
  grpc::Status status = stub->EvictEntries(&context, request, &r);
  if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "EvictEntries"));
  if (inv.Has("--json")) {
    inv.out << ToJson(r) << std::endl;
    return kExitOk;
  }
  inv.out << (request.dry_run() ? "would evict " : "evicted ") << r.evicted_size() << " entries, "
          << (request.dry_run() ? "freeing " : "freed ") << HumanBytes(r.bytes_freed())
          << (request.dry_run() ? " (dry run)" : "") << "\n";
  for (const auto& key : r.evicted()) inv.out << "  " << key << "\n";
  inv.out << std::flush;
  return kExitOk;
}

}  // namespace

void AddCacheCommands(std::vector<CommandSpec>& commands) {
  const OptionSpec json = {"--json", "", "print the reply as proto3 JSON (cacheKey, blobPath: the JSON names)"};
  commands.push_back({"cache ls",
                      "",
                      "list cache entries, ordered by cache key",
                      "",
                      {{"--op", "OP", "only this op family (\"source\" for raw sources)"},
                       {"--uri-prefix", "PREFIX", "only URIs starting with PREFIX"},
                       {"--arch", "ARCH", "only this arch"},
                       {"--limit", "N", "at most N entries (default 100)"},
                       json},
                      0,
                      0,
                      RunLs});
  commands.push_back({"cache get",
                      "KEY",
                      "one entry: what it was built from, by which toolchain, its use",
                      "KEY is a full cache key or a unique prefix of at least 8 hex digits.",
                      {json},
                      1,
                      1,
                      RunGet});
  commands.push_back({"cache stats", "", "the cache's size, hit rates and switches", "", {json}, 0, 0, RunStats});
  commands.push_back({"cache verify",
                      "",
                      "check every entry's blob against its checksum",
                      "Damaged blobs are quarantined and their rows removed by the daemon. Exits with 4 when\n"
                      "anything was wrong.",
                      {json},
                      0,
                      0,
                      RunVerify});
  commands.push_back({"cache evict",
                      "",
                      "remove entries (by key, op, URI prefix, arch, or all)",
                      "At least one filter, or --all, is required. Entries in use by a running process stay\n"
                      "loaded there; the next request compiles them again.",
                      {{"--key", "KEY", "a full cache key (64 hex digits; `kiln cache get PREFIX` finds one)", true},
                       {"--op", "OP", "every entry of this op family"},
                       {"--uri-prefix", "PREFIX", "every entry whose URI starts with PREFIX"},
                       {"--arch", "ARCH", "every entry of this arch"},
                       {"--all", "", "every entry"},
                       {"--dry-run", "", "only say what would be evicted"},
                       json},
                      0,
                      0,
                      RunEvict});
}

}  // namespace kiln::cli
