// kiln inspect KEY|URI: one view of a cache entry (or of every entry of a URI): its metadata,
// debug controls, manifest, generated sources folder, kernels and their attributes, the job
// that built it and the compile log. Human or --json.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cctype>
#include <ostream>
#include <set>

#include "client/cli/command.h"
#include "client/cli/inspect_view.h"
#include "client/cli/output.h"
#include "client/core/rpc/daemon_connection.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"

namespace kiln::cli {
namespace {

// A key, or a prefix of one: 8 to 64 hex digits. URIs always hold a letter past 'f' or a '_'.
bool LooksLikeKey(const std::string& text) {
  if (text.size() < 8 || text.size() > 64) return false;
  return std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Thrown with the exit code of a failed step (its message is already printed).
struct Failed {
  int exit_code;
};

v1::CacheEntry GetEntry(Invocation& inv, const std::string& key) {
  auto stub = v1::CacheService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::GetEntryRequest request;
  request.set_cache_key(key);
  v1::CacheEntry entry;
  grpc::Status status = stub->GetEntry(&context, request, &entry);
  if (!status.ok()) throw Failed{inv.Fail(inv.Connection().Explain(status, "GetEntry " + key))};
  return entry;
}

// Every entry whose URI starts with `prefix` (and has `arch`, when given), all pages.
std::vector<v1::CacheEntry> ListByUri(Invocation& inv, const std::string& prefix, const std::string& arch) {
  auto stub = v1::CacheService::NewStub(inv.Connection().channel());
  v1::ListEntriesRequest request;
  request.set_uri_prefix(prefix);
  request.set_arch(arch);
  request.set_page_size(1000);
  std::vector<v1::CacheEntry> entries;
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(inv.Deadline());
    v1::ListEntriesResponse page;
    grpc::Status status = stub->ListEntries(&context, request, &page);
    if (!status.ok()) throw Failed{inv.Fail(inv.Connection().Explain(status, "ListEntries"))};
    for (auto& e : *page.mutable_entries()) entries.push_back(std::move(e));
    if (page.next_page_token().empty() || page.entries_size() == 0) break;
    request.set_page_token(page.next_page_token());
  }
  return entries;
}

// The full entries (manifest and log included) of URI `uri`; none is an error that says what
// the cache does hold near it.
std::vector<v1::CacheEntry> EntriesOfUri(Invocation& inv, const std::string& uri, const std::string& arch) {
  std::vector<v1::CacheEntry> found;
  std::set<std::string> longer;  // URIs that start with the one asked for
  for (auto& e : ListByUri(inv, uri, arch)) {
    if (e.uri() == uri) found.push_back(std::move(e));
    else if (longer.size() < 5) longer.insert(e.uri());
  }
  if (found.empty()) {
    std::string message = "no cache entry has URI " + uri + (arch.empty() ? "" : " for " + arch);
    if (!arch.empty()) {
      std::set<std::string> archs;
      for (const auto& e : ListByUri(inv, uri, ""))
        if (e.uri() == uri) archs.insert(e.arch());
      if (!archs.empty()) {
        message += "; it has entries for";
        for (const auto& a : archs) message += " " + a;
      }
    }
    if (!longer.empty()) {
      message += "; URIs that start with it:";
      for (const auto& u : longer) message += " " + u;
    }
    if (uri.size() < 8 && std::all_of(uri.begin(), uri.end(), [](unsigned char c) { return std::isxdigit(c); }))
      message += " (a key prefix needs at least 8 hex digits)";
    message += ". `kiln cache ls` lists the entries";
    throw Failed{inv.Fail(Status(StatusCode::kNotFound, message))};
  }
  // The listing leaves out the manifest and the log: fetch each entry whole.
  for (auto& e : found) e = GetEntry(inv, e.cache_key());
  return found;
}

// The job that built `entry`, or why there is none to show.
void FindJob(Invocation& inv, EntryView& view) {
  const std::string& id = view.entry.job_id();
  if (id.empty()) {
    view.job_note = "the entry names no job";
    return;
  }
  auto stub = v1::JobService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::GetJobRequest request;
  request.set_id(id);
  v1::Job job;
  grpc::Status status = stub->GetJob(&context, request, &job);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    view.job_note = "job " + id +
                    " is no longer in the daemon's job history (a daemon keeps its last 1000 finished jobs, in "
                    "memory: a restart forgets them, and a job of another daemon sharing the cache is only known "
                    "there); the entry keeps the manifest and the compile log shown here";
    return;
  }
  if (!status.ok()) {
    view.job_note = "could not ask for job " + id + ": " + inv.Connection().Explain(status, "GetJob " + id).message();
    return;
  }
  // Job ids carry the daemon's pid: a later daemon with the same pid reuses them.
  if (!job.cache_key().empty() && job.cache_key() != view.entry.cache_key()) {
    view.job_note = "job " + id + " on this daemon built another key (" + job.cache_key().substr(0, 12) +
                    "): the job id was reused by a later daemon; the job that built this entry is gone";
    return;
  }
  view.job = std::move(job);
}

int RunInspect(Invocation& inv) {
  const std::string what = inv.positionals()[0];
  const std::string arch = inv.Get("--arch");
  try {
    std::vector<v1::CacheEntry> entries;
    if (LooksLikeKey(what)) {
      if (inv.Has("--arch"))
        throw UsageError("--arch picks among the entries of a URI; " + what + " is a cache key (one entry)");
      entries.push_back(GetEntry(inv, Lower(what)));
    } else {
      entries = EntriesOfUri(inv, what, arch);
    }
    std::vector<EntryView> views;
    for (auto& e : entries) {
      EntryView view;
      view.entry = std::move(e);
      view.generated = ReadGeneratedFolder(view.entry.manifest(), inv.Connection().is_local());
      FindJob(inv, view);
      views.push_back(std::move(view));
    }
    if (inv.Has("--json")) {
      nlohmann::json out = {{"entries", nlohmann::json::array()}};
      for (const auto& view : views) out["entries"].push_back(EntryViewJson(view));
      inv.out << out.dump(2) << std::endl;
      return kExitOk;
    }
    for (size_t i = 0; i < views.size(); ++i) {
      if (views.size() > 1)
        inv.out << (i == 0 ? "" : "\n") << "=== entry " << i + 1 << " of " << views.size() << " for "
                << views[i].entry.uri() << ": " << views[i].entry.arch() << ", " << DebugText(views[i].entry.debug())
                << " ===\n";
      PrintEntryView(inv.out, views[i]);
    }
    return kExitOk;
  } catch (const Failed& failed) {
    return failed.exit_code;
  }
}

}  // namespace

void AddInspectCommand(std::vector<CommandSpec>& commands) {
  CommandSpec c;
  c.path = "inspect";
  c.arguments = "KEY|URI";
  c.summary = "everything about a cache entry: manifest, generated sources, kernels, job, compile log";
  c.details = "KEY is a full cache key or a unique prefix of at least 8 hex digits; anything else is an\n"
              "exact URI, and every entry of it is shown (one per arch and debug variant; --arch picks an\n"
              "arch). The view: the entry (key, op and params, arch, debug controls, cubin, blob, created,\n"
              "hits, versions, launch hints), its manifest (options, entries, toolchain, kernels-tree\n"
              "digest, every source with origin, size, SHA-256 and path), the generated-sources folder\n"
              "read on this machine (each file against the manifest's hash, or that it was removed), the\n"
              "kernels (registers, shared memory, stack, spills, constant bytes, max threads), the job\n"
              "that built it (when the daemon still remembers it) and the compile log kept with the\n"
              "entry. An unknown key or URI, or a prefix of several keys, exits 1.\n\n"
              "Examples:\n"
              "  kiln inspect d8108e2d\n"
              "  kiln inspect rmsnorm_bf16_h4096 --arch sm_90 --json";
  c.options = {{"--arch", "ARCH", "with a URI: only its entry for this arch"},
               {"--json", "",
                "print {\"entries\": [{\"entry\", \"generated\", \"job\" or \"jobNote\"}]} (proto3 JSON names)"}};
  c.min_positionals = 1;
  c.max_positionals = 1;
  c.run = RunInspect;
  commands.push_back(std::move(c));
}

}  // namespace kiln::cli
