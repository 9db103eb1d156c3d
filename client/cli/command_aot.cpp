// kiln aot build --arch "ARCH..." --ops LIST --out DIR: a prebuilt bundle (the layout:
// proto/kiln/v1/bundle.proto) of every spec of LIST for every listed arch, compiled (or found)
// by the daemon. The arch list is explicit, never the local GPU: a bundle is for a fleet.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <google/protobuf/util/time_util.h>
#include <grpcpp/grpcpp.h>

#include "client/cli/command.h"
#include "client/cli/spec_batch.h"
#include "client/core/rpc/daemon_connection.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "proto/bundle_layout.h"

namespace kiln::cli {
namespace {
namespace fs = std::filesystem;

// Writes one blob of the bundle through a temp file (one per call: workers may write the same
// blob at once) and a rename (an existing one is kept: its name is its hash).
void WriteBlob(const std::string& dir, const std::string& sha256, const std::string& bytes) {
  static std::atomic<uint64_t> writes{0};
  const std::string path = proto::BundleBlobPath(dir, sha256);
  if (fs::exists(path)) return;
  fs::create_directories(fs::path(path).parent_path());
  const std::string temp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(writes++);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + temp + ": " + strerror(errno));
  }
  if (rename(temp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + temp + ": " + strerror(errno));
}

// The toolchain fields that must be one for every entry of a bundle.
std::string ToolchainText(const v1::Toolchain& t) {
  return "Kiln " + t.kiln() + ", NVRTC " + t.nvrtc() + ", nvJitLink " + t.nvjitlink() + ", CUDA headers " +
         t.cuda_headers() + ", cache format " + std::to_string(t.cache_format());
}

int RunAotBuild(Invocation& inv) {
  const int jobs = JobsOption(inv);
  const std::vector<std::string> archs = ArchListOption(inv);
  if (archs.empty())
    throw UsageError("--arch is required: a bundle is built for an explicit arch list (e.g. --arch \"sm_80 sm_90a\"), "
                     "never for the local GPU");
  if (!inv.Has("--ops")) throw UsageError("--ops LIST is required (a spec list: kiln cache export-list writes one)");
  if (!inv.Has("--out")) throw UsageError("--out DIR is required (a new or empty folder)");
  const std::string out = inv.Get("--out");
  std::error_code ec;
  if (fs::exists(out, ec) && (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
    throw UsageError("--out " + out + " exists and is not an empty folder; a bundle is written into a new one");
  LoadedSpecs specs = LoadSpecTargets(inv.Get("--ops"), archs);
  fs::create_directories(out, ec);
  if (ec) throw UsageError("cannot create --out " + out + ": " + ec.message());

  auto cache = v1::CacheService::NewStub(inv.Connection().channel());
  v1::BundleManifest manifest;
  manifest.set_bundle_format(proto::kBundleFormatVersion);
  for (const auto& a : archs) manifest.add_archs(a);
  manifest.set_spec_list(inv.Get("--ops"));
  bool have_toolchain = false;
  std::mutex manifest_mu;  // on_result runs on several workers: the RPC and the blob outside it
  auto on_result = [&](const SpecResult& r) {
    // The entry's options and toolchain are the cache's record of it.
    v1::GetEntryRequest request;
    request.set_cache_key(r.reply.cache_key());
    v1::CacheEntry entry;
    grpc::ClientContext context;
    context.set_deadline(inv.Deadline());
    grpc::Status status = cache->GetEntry(&context, request, &entry);
    if (!status.ok())
      throw std::runtime_error("the daemon served it but has no cache entry for it (" + status.error_message() +
                               "); kiln aot build needs a daemon with its cache on (not --no-cache)");
    // Blobs are named by their hash: two workers writing one write the same bytes.
    WriteBlob(out, r.reply.sha256(), r.cubin);
    const v1::Toolchain& toolchain = entry.manifest().toolchain();
    std::lock_guard<std::mutex> lock(manifest_mu);
    if (!have_toolchain) {
      *manifest.mutable_toolchain() = toolchain;
      manifest.set_kiln_version(toolchain.kiln());
      have_toolchain = true;
    } else if (ToolchainText(toolchain) != ToolchainText(manifest.toolchain())) {
      throw std::runtime_error("built by " + ToolchainText(toolchain) + ", the bundle's other entries by " +
                               ToolchainText(manifest.toolchain()) + " (was the daemon upgraded meanwhile?)");
    }
    v1::BundleEntry* e = manifest.add_entries();
    e->set_op(entry.op());
    *e->mutable_params() = r.reply.params();
    e->set_uri(r.reply.uri());
    e->set_arch(r.reply.arch());
    *e->mutable_options() = entry.options();
    e->set_cache_key(r.reply.cache_key());
    e->set_sha256(r.reply.sha256());
    e->set_size_bytes(r.cubin.size());
    *e->mutable_kernels() = r.reply.kernels();
  };
  const SpecBatchSummary summary = RunSpecBatch(inv, specs.targets, jobs, on_result);

  // Two list lines may name one specialization (a param spelled out and left to its default):
  // one entry per key.
  auto* entries = manifest.mutable_entries();
  std::sort(entries->begin(), entries->end(),
            [](const v1::BundleEntry& a, const v1::BundleEntry& b) { return a.cache_key() < b.cache_key(); });
  entries->erase(
      std::unique(entries->begin(), entries->end(),
                  [](const v1::BundleEntry& a, const v1::BundleEntry& b) { return a.cache_key() == b.cache_key(); }),
      entries->end());
  *manifest.mutable_created() = google::protobuf::util::TimeUtil::GetCurrentTime();
  if (manifest.entries_size() > 0) {
    if (std::string problem = proto::CheckBundleManifest(manifest); !problem.empty())
      return inv.Fail(Status(StatusCode::kInternal, "the bundle's manifest fails its own check: " + problem));
    if (std::string error = proto::WriteBundleManifest(out, manifest); !error.empty())
      return inv.Fail(Status(StatusCode::kInternal, error));
  }
  inv.err << "kiln aot build: " << summary.Text() << "; " << out << " holds " << manifest.entries_size()
          << " entries for " << manifest.archs_size() << " archs"
          << (manifest.entries_size() == 0 ? " (no manifest written: nothing succeeded)" : "") << std::endl;
  return summary.failed > 0 ? kExitDaemonError : kExitOk;
}

// kiln aot index DIR: DIR/index.json listing every bundle folder under DIR (each manifest read and
// checked first), so that DIR can be served as an artifact repository.
int RunAotIndex(Invocation& inv) {
  const std::string dir = inv.positionals()[0];
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(dir + " is not a folder");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && fs::exists(e.path() / proto::kBundleManifestName)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  v1::ArtifactIndex index;
  index.set_index_format(proto::kArtifactIndexFormatVersion);
  size_t entries = 0;
  for (const auto& name : names) {
    auto manifest = proto::ReadBundleManifest(dir + "/" + name);
    if (!manifest.error.empty()) return inv.Fail(Status(StatusCode::kInvalidArgument, manifest.error));
    entries += manifest.manifest.entries_size();
    index.add_bundles(name);
  }
  if (std::string problem = proto::CheckArtifactIndex(index); !problem.empty())
    return inv.Fail(Status(StatusCode::kInvalidArgument, dir + ": " + problem));
  if (std::string error = proto::WriteArtifactIndex(dir, index); !error.empty())
    return inv.Fail(Status(StatusCode::kInternal, error));
  inv.out << "kiln aot index: " << dir << "/" << proto::kArtifactIndexName << " lists " << names.size() << " bundles ("
          << entries << " entries)" << std::endl;
  return kExitOk;
}

}  // namespace

void AddAotCommands(std::vector<CommandSpec>& commands) {
  CommandSpec c;
  c.path = "aot build";
  c.arguments = "--arch \"ARCH...\" --ops LIST --out DIR";
  c.summary = "build a prebuilt bundle of a spec list for an explicit arch list (kilnd --prebuilt serves it)";
  c.details = "Every spec of LIST (the warm-up list format; `kiln cache export-list` writes one) is fetched\n"
              "from the daemon for every --arch: compiled there, or found in its cache. The bundle holds\n"
              "manifest.json (format, Kiln and toolchain versions, per entry op, params, URI, arch, cache key,\n"
              "SHA-256, size, kernel attributes) and the cubins under blobs/ by checksum. A daemon serves an\n"
              "entry only under its exact cache key, so build the bundle with the Kiln version, toolchain and\n"
              "kernels folder of the daemons that will serve it. Progress: a bar on a terminal, else one JSON\n"
              "line per spec on stdout. Exits with 1 when any spec failed (the bundle then holds the others).\n\n"
              "Example:\n"
              "  kiln cache export-list --out llama.list\n"
              "  kiln aot build --arch \"sm_80 sm_90a\" --ops llama.list --out /srv/kiln/bundles/llama-v1";
  c.options = SpecBatchOptions();
  c.options.push_back({"--ops", "LIST", "the spec list (a file; - reads standard input)"});
  c.options.push_back({"--out", "DIR", "the bundle folder to create (new or empty)"});
  c.run = RunAotBuild;
  commands.push_back(std::move(c));

  CommandSpec index;
  index.path = "aot index";
  index.arguments = "DIR";
  index.summary = "write DIR/index.json listing the bundles under DIR, so a web server can serve DIR as a repository";
  index.details = "Every sub-folder of DIR that holds a manifest.json (a bundle from kiln aot build) is read, checked\n"
                  "and listed; a bad manifest stops it, naming the folder. Serve DIR with any web server and point\n"
                  "kilnd --artifact-url at its URL.\n\n"
                  "Example:\n"
                  "  kiln aot build --arch sm_90 --ops llama.list --out /srv/www/kiln/llama-v1\n"
                  "  kiln aot index /srv/www/kiln";
  index.min_positionals = 1;
  index.max_positionals = 1;
  index.run = RunAotIndex;
  commands.push_back(std::move(index));
}

}  // namespace kiln::cli
