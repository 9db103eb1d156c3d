#include "server/tiers/prebuilt_bundles.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/bundle_layout.h"
#include "server/rpc/wire_forms.h"
#include "server/tiers/bundle_blob.h"

namespace kiln::server {
namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<PrebuiltBundles>> PrebuiltBundles::Open(const std::vector<std::string>& dirs,
                                                                       bool ignore_version) {
  std::unique_ptr<PrebuiltBundles> out(new PrebuiltBundles());
  out->ignore_version_ = ignore_version;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return absl::InvalidArgumentError(absl::StrCat("--prebuilt \"", dir, "\" is not a folder"));
    auto loaded = proto::ReadBundleManifest(dir);
    if (!loaded.error.empty()) return absl::InvalidArgumentError(absl::StrCat("--prebuilt: ", loaded.error));
    auto bundle = std::make_unique<Bundle>(Bundle{dir, std::move(loaded.manifest)});
    for (int i = 0; i < bundle->manifest.entries_size(); ++i) {
      const v1::BundleEntry& e = bundle->manifest.entries(i);
      out->by_key_[e.cache_key()].push_back(Ref{bundle.get(), i});
      if (ignore_version)
        out->by_loose_[LooseKey(e.uri(), e.arch(), {e.options().begin(), e.options().end()})].push_back(
            Ref{bundle.get(), i});
    }
    spdlog::info("prebuilt bundle {}: {} entries, Kiln {}, NVRTC {}, built for {}", dir,
                 bundle->manifest.entries_size(), bundle->manifest.kiln_version(), bundle->manifest.toolchain().nvrtc(),
                 absl::StrJoin(bundle->manifest.archs(), " "));
    out->dirs_.push_back(dir);
    out->bundles_.push_back(std::move(bundle));
  }
  if (ignore_version && !dirs.empty())
    spdlog::warn("--prebuilt-ignore-version is ON: bundle entries of another Kiln version, toolchain or kernels tree "
                 "may answer by URI, arch and options. A diagnostic control for matched-versions experiments only; "
                 "such answers are never stored in the cache. Turn it off for production");
  return out;
}

std::string PrebuiltBundles::LooseKey(const std::string& uri, const std::string& arch,
                                      const std::vector<std::string>& options) {
  return absl::StrCat(uri, "\n", arch, "\n", absl::StrJoin(options, "\n"));
}

std::optional<PrebuiltBundles::Found> PrebuiltBundles::Load(
    const Ref& ref, bool version_ignored, const std::function<void(const std::string&)>& on_problem) const {
  const v1::BundleEntry& e = ref.bundle->manifest.entries(ref.index);
  const std::string path = proto::BundleBlobPath(ref.bundle->dir, e.sha256());
  auto refuse = [&](const std::string& what) -> std::optional<Found> {
    rejected_++;
    if (on_problem)
      on_problem(absl::StrCat("prebuilt bundle ", ref.bundle->dir, ": entry ", e.uri(), " for ", e.arch(), " (key ",
                              e.cache_key().substr(0, 16), "): ", what, "; not served"));
    return std::nullopt;
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return refuse(absl::StrCat("its blob ", path, " cannot be read"));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  auto cubin = std::make_shared<const std::string>(bytes.str());
  if (std::string problem = BundleBlobProblem(e, *cubin); !problem.empty()) return refuse(problem);
  Found found;
  found.bundle = ref.bundle->dir;
  found.entry = e;
  for (const auto& k : e.kernels()) found.kernels.push_back(FromWire(k));
  found.cubin = std::move(cubin);
  found.version_ignored = version_ignored;
  return found;
}

std::optional<PrebuiltBundles::Found> PrebuiltBundles::Find(
    const std::string& key, const std::string& uri, const std::string& arch, const std::vector<std::string>& options,
    const std::function<void(const std::string&)>& on_problem) const {
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    for (const Ref& ref : it->second) {
      const v1::BundleEntry& e = ref.bundle->manifest.entries(ref.index);
      if (std::string mismatch = BundleEntryMismatch(e, key, uri, arch); !mismatch.empty()) {
        rejected_++;
        if (on_problem) on_problem(absl::StrCat("prebuilt bundle ", ref.bundle->dir, ": ", mismatch, "; not served"));
        continue;
      }
      if (auto found = Load(ref, false, on_problem)) return found;
    }
  }
  if (!ignore_version_) return std::nullopt;
  if (auto it = by_loose_.find(LooseKey(uri, arch, options)); it != by_loose_.end()) {
    for (const Ref& ref : it->second)
      if (auto found = Load(ref, true, on_problem)) return found;
  }
  return std::nullopt;
}

std::string PrebuiltBundles::Describe() const {
  std::vector<std::string> parts;
  for (const auto& b : bundles_) parts.push_back(absl::StrCat(b->dir, " (", b->manifest.entries_size(), " entries)"));
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

}  // namespace kiln::server
