// PrebuiltBundles: the read-only prebuilt (AOT) bundles of `kilnd --prebuilt DIR` (the layout:
// proto/kiln/v1/bundle.proto), the lookup tier between the on-disk cache and a compile.
//
// Every manifest is read and checked when the daemon starts (a bad or missing bundle stops it,
// naming the folder). A lookup answers only with an entry whose cache key equals the request's:
// the key covers the Kiln version, the toolchain and every source byte, so a bundle built by
// another version, toolchain or kernels tree never answers. The blob is read and its SHA-256
// checked on every lookup; a blob that is missing, of another size or another hash is logged,
// counted and not served (the request goes on to compile). Nothing here writes to a bundle.
//
// --prebuilt-ignore-version (a diagnostic control, docs/diagnostic-controls.md) lets an entry
// of the same URI, arch and options answer under another key: a matched-versions experiment,
// never for production. Such an answer is marked, and the engine neither stores nor memoizes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/bundle.pb.h"
#include "server/jit/kernel_attributes.h"

namespace kiln::server {

class PrebuiltBundles {
 public:
  // INVALID_ARGUMENT naming the folder when one cannot be read or its manifest fails a check.
  static absl::StatusOr<std::unique_ptr<PrebuiltBundles>> Open(const std::vector<std::string>& dirs,
                                                               bool ignore_version);

  struct Found {
    std::string bundle;  // the folder
    v1::BundleEntry entry;
    std::vector<KernelAttributes> kernels;
    std::shared_ptr<const std::string> cubin;  // its SHA-256 verified
    bool version_ignored = false;              // answered under another key (--prebuilt-ignore-version)
  };
  // The entry of `key` (or, with ignore_version, of uri + arch + options) with its blob read and
  // verified; nullopt when no bundle has a usable one (`on_problem` hears of every one refused).
  std::optional<Found> Find(const std::string& key, const std::string& uri, const std::string& arch,
                            const std::vector<std::string>& options,
                            const std::function<void(const std::string&)>& on_problem) const;

  // "DIR (N entries), ..." for messages; the folders in --prebuilt order.
  std::string Describe() const;
  const std::vector<std::string>& dirs() const { return dirs_; }
  size_t entries() const { return by_key_.size(); }
  uint64_t rejected() const { return rejected_; }

 private:
  struct Bundle {
    std::string dir;
    v1::BundleManifest manifest;
  };
  struct Ref {
    const Bundle* bundle;
    int index;
  };
  PrebuiltBundles() = default;
  std::optional<Found> Load(const Ref& ref, bool version_ignored,
                            const std::function<void(const std::string&)>& on_problem) const;
  static std::string LooseKey(const std::string& uri, const std::string& arch, const std::vector<std::string>& options);

  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<Bundle>> bundles_;
  std::map<std::string, std::vector<Ref>> by_key_;    // a key may be in several bundles: first one wins
  std::map<std::string, std::vector<Ref>> by_loose_;  // ignore_version only
  bool ignore_version_ = false;
  mutable std::atomic<uint64_t> rejected_{0};
};

}  // namespace kiln::server
