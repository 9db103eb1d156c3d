// KernelTree: the read-only kernels folder as compiles see it. A snapshot holds the bytes of
// every file a compile can include and one digest over them (relative paths + contents).
// inotify keeps it current, so a warm request pays one non-blocking read() on the inotify
// descriptor instead of a tree walk; where inotify is unavailable, a stat walk decides.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kiln::kernels {

struct TreeSnapshot {
  // Path relative to the kernels folder ("include/kiln/vec.cuh", "src/norm/rmsnorm.cu") →
  // bytes. Only device-code files: *.cuh *.cu *.h *.hpp *.inc under include/ and src/.
  std::map<std::string, std::string, std::less<>> files;
  std::string digest;       // SHA-256 hex over the sorted (path, content) pairs
  uint64_t generation = 0;  // increments each time a change is seen

  // Bytes of a file, or NOT_FOUND naming the path and the kernels folder.
  absl::StatusOr<std::string_view> Read(std::string_view relative_path) const;
};

class KernelTree {
 public:
  // Reads the whole tree once. Never writes into it (it may be read-only).
  static absl::StatusOr<std::unique_ptr<KernelTree>> Open(const std::string& root);
  ~KernelTree();

  const std::string& root() const { return root_; }

  // The current snapshot; rescans first when the tree changed since the last call.
  // Thread-safe; the returned snapshot stays valid while held.
  std::shared_ptr<const TreeSnapshot> Current();

 private:
  KernelTree() = default;
  bool ChangedSinceLastScan();  // drains inotify events, or compares a stat walk
  absl::Status Rescan();

  std::string root_;
  int inotify_fd_ = -1;
  std::map<int, std::string> watches_;  // watch descriptor → directory
  std::string stat_signature_;          // fallback when inotify is unavailable
  std::mutex mu_;
  std::shared_ptr<const TreeSnapshot> current_;
};

}  // namespace kiln::kernels
