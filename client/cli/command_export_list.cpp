// kiln cache export-list: the specs clients actually asked this daemon for (its cache entries),
// as a spec list for `kiln warm`, `kilnd --warm` and `kiln aot build --ops`.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>

#include "client/cli/command.h"
#include "client/core/rpc/daemon_connection.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "proto/spec_list.h"

namespace kiln::cli {
namespace {

struct Spec {
  proto::SpecListEntry entry;
  uint64_t hits = 0;
  int entries = 0;
};

int RunExportList(Invocation& inv) {
  uint64_t min_hits = 0;
  if (inv.Has("--min-hits")) {
    const std::string text = inv.Get("--min-hits");
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), min_hits);
    if (ec != std::errc() || end != text.data() + text.size())
      throw UsageError("--min-hits wants a non-negative integer, got '" + text + "'");
  }
  auto stub = v1::CacheService::NewStub(inv.Connection().channel());
  v1::ListEntriesRequest request;
  request.set_op(inv.Get("--op"));
  request.set_arch(inv.Get("--arch"));
  request.set_page_size(1000);
  std::map<std::pair<std::string, std::map<std::string, std::string>>, Spec> specs;
  int sources = 0, debug = 0, total = 0;
  for (;;) {
    grpc::ClientContext context;
    context.set_deadline(inv.Deadline());
    v1::ListEntriesResponse page;
    grpc::Status status = stub->ListEntries(&context, request, &page);
    if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "ListEntries"));
    for (const auto& e : page.entries()) {
      ++total;
      // A raw source is not an op a list can name; a debug build is a diagnostic, not a roll-out.
      if (e.op() == "source") {
        ++sources;
        continue;
      }
      if (e.debug().lineinfo() || e.debug().device_debug() || e.debug().verbose_log()) {
        ++debug;
        continue;
      }
      std::map<std::string, std::string> params(e.params().begin(), e.params().end());
      Spec& spec = specs[{e.op(), params}];
      spec.entry.op = e.op();
      spec.entry.params = params;
      if (std::find(spec.entry.archs.begin(), spec.entry.archs.end(), e.arch()) == spec.entry.archs.end())
        spec.entry.archs.push_back(e.arch());
      spec.hits += e.hit_count();
      spec.entries++;
    }
    if (page.next_page_token().empty() || page.entries_size() == 0) break;
    request.set_page_token(page.next_page_token());
  }
  std::vector<Spec*> order;
  for (auto& [_, spec] : specs) {
    std::sort(spec.entry.archs.begin(), spec.entry.archs.end());
    if (spec.hits >= min_hits) order.push_back(&spec);
  }
  // Most asked-for first: a warm-up that is cut short has done the ones that matter.
  std::stable_sort(order.begin(), order.end(), [](const Spec* a, const Spec* b) { return a->hits > b->hits; });

  std::ofstream file;
  if (inv.Has("--out")) {
    file.open(inv.Get("--out"), std::ios::trunc);
    if (!file) throw UsageError("cannot write --out " + inv.Get("--out"));
  }
  std::ostream& out = inv.Has("--out") ? static_cast<std::ostream&>(file) : inv.out;
  out << "# kiln spec list: exported from the cache of " << inv.Connection().target() << "\n"
      << "# " << order.size() << " specs from " << total << " entries (left out: " << sources << " raw sources, "
      << debug << " debug builds, " << specs.size() - order.size() << " below --min-hits)\n"
      << "# OP KEY=VALUE... @ARCH...  # hits: how often clients were served it from the cache\n";
  for (const Spec* spec : order)
    out << proto::FormatSpecLine(spec->entry, std::to_string(spec->hits) + " hits") << "\n";
  out.flush();
  if (!out) throw UsageError("cannot write the list");
  if (inv.Has("--out"))
    inv.err << "kiln cache export-list: " << order.size() << " specs written to " << inv.Get("--out") << std::endl;
  return kExitOk;
}

}  // namespace

void AddExportListCommand(std::vector<CommandSpec>& commands) {
  CommandSpec c;
  c.path = "cache export-list";
  c.summary = "the specs clients asked this daemon for, as a spec list (for kiln warm and kiln aot build)";
  c.details = "One line per op specialization in the cache: `OP KEY=VALUE... @ARCH...  # N hits`, the archs it\n"
              "was built for, most hits first. Raw sources and debug builds (-lineinfo, -G, verbose log) are\n"
              "left out.\n\n"
              "Example:\n"
              "  kiln cache export-list --out llama.list && kiln warm llama.list --socket /run/kiln/other.sock";
  c.options = {{"--op", "OP", "only this op family"},
               {"--arch", "ARCH", "only entries built for this arch"},
               {"--min-hits", "N", "only specs served from the cache at least N times"},
               {"--out", "FILE", "write the list to FILE (default: standard output)"}};
  c.run = RunExportList;
  commands.push_back(std::move(c));
}

}  // namespace kiln::cli
