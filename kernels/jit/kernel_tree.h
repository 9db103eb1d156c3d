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
  std::string root;  // the kernels folder the snapshot was read from (for messages only)
  // Path relative to the kernels folder ("include/kiln/vec.cuh", "src/norm/rmsnorm.cu") →
  // bytes. Only device-code files: *.cuh *.cu *.h *.hpp *.inc under include/ and src/
  // (names starting with '.' are skipped: editor swap and backup files).
  std::map<std::string, std::string, std::less<>> files;
  std::string digest;       // SHA-256 hex over the sorted (path, content) pairs
  uint64_t generation = 0;  // increments each time the content (the digest) changes

  // Bytes of a file, or NOT_FOUND naming the path and the kernels folder.
  absl::StatusOr<std::string_view> Read(std::string_view relative_path) const;
};

// Whether a file name is device code a snapshot holds (by its extension).
bool IsDeviceCodeFile(std::string_view name);

class KernelTree {
 public:
  enum class WatchMode {
    kInotify,   // inotify, falling back to kStatWalk when it cannot be set up
    kStatWalk,  // compare a stat walk on every Current() (tests; file systems without inotify)
  };

  // Reads the whole tree once. Never writes into it (it may be read-only). NOT_FOUND when
  // `root` is not a folder.
  static absl::StatusOr<std::unique_ptr<KernelTree>> Open(const std::string& root,
                                                          WatchMode mode = WatchMode::kInotify);
  ~KernelTree();
  KernelTree(const KernelTree&) = delete;
  KernelTree& operator=(const KernelTree&) = delete;

  const std::string& root() const { return root_; }
  bool using_inotify() const { return inotify_fd_ >= 0; }

  // The current snapshot; rescans first when the tree changed since the last call. An edit
  // whose write() returned before this call is always seen (inotify queues the event inside
  // the write). Thread-safe; the returned snapshot stays valid while held. When a rescan
  // fails (a folder vanished mid-walk), the previous snapshot is returned and the next call
  // rescans again.
  std::shared_ptr<const TreeSnapshot> Current();

 private:
  KernelTree() = default;
  bool ChangedSinceLastScan();  // drains inotify events, or compares a stat walk
  absl::Status Rescan();
  void StopInotify();

  std::string root_;
  int inotify_fd_ = -1;
  std::map<int, std::string> watches_;  // watch descriptor → directory
  std::string stat_signature_;          // fallback when inotify is unavailable
  bool rescan_pending_ = false;         // the last rescan failed
  std::mutex mu_;
  std::shared_ptr<const TreeSnapshot> current_;
};

}  // namespace kiln::kernels
