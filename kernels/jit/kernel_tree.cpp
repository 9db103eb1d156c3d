#include "kernels/jit/kernel_tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/jit/digest.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

// The folders of the kernels tree that hold device code; nothing else is read or watched.
constexpr const char* kDeviceCodeFolders[] = {"include", "src"};

constexpr uint32_t kWatchMask = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

struct WalkEntry {
  std::string relative;  // "include/kiln/common/vec.cuh"
  std::string absolute;
  struct stat st {};
  bool is_dir = false;
};

// Walks include/ and src/ below `root` in a fixed (sorted) order. `on_dir` runs for each
// folder before it is listed, so a watch added there sees every later change in it.
// Folder symlinks are not followed; file symlinks are. Entries that vanish mid-walk are
// skipped (their removal is itself a change the next call sees).
void WalkFolder(const std::string& absolute, const std::string& relative,
                const std::function<void(const std::string&)>& on_dir, std::vector<WalkEntry>* out) {
  on_dir(absolute);
  DIR* dir = opendir(absolute.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;  // ".", "..", dotfiles (editor swap files)
    names.emplace_back(entry->d_name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    WalkEntry entry;
    entry.absolute = absolute + "/" + name;
    entry.relative = relative + "/" + name;
    if (lstat(entry.absolute.c_str(), &entry.st) != 0) continue;
    if (S_ISDIR(entry.st.st_mode)) {
      entry.is_dir = true;
      out->push_back(entry);
      WalkFolder(entry.absolute, entry.relative, on_dir, out);
      continue;
    }
    if (S_ISLNK(entry.st.st_mode) && stat(entry.absolute.c_str(), &entry.st) != 0) continue;
    if (!S_ISREG(entry.st.st_mode) || !IsDeviceCodeFile(name)) continue;
    out->push_back(std::move(entry));
  }
}

std::vector<WalkEntry> WalkTree(const std::string& root, const std::function<void(const std::string&)>& on_dir) {
  std::vector<WalkEntry> entries;
  for (const char* folder : kDeviceCodeFolders) {
    std::string absolute = root + "/" + folder;
    struct stat st {};
    if (lstat(absolute.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    WalkFolder(absolute, folder, on_dir, &entries);
  }
  return entries;
}

std::string StatSignature(const std::vector<WalkEntry>& entries) {
  std::string signature;
  for (const WalkEntry& e : entries) {
    absl::StrAppend(&signature, e.is_dir ? "D " : "F ", e.relative, " ", e.st.st_size, " ", e.st.st_ino, " ",
                    e.st.st_mtim.tv_sec, ".", e.st.st_mtim.tv_nsec, " ", e.st.st_ctim.tv_sec, ".", e.st.st_ctim.tv_nsec,
                    "\n");
  }
  return signature;
}

bool ReadWholeFile(const std::string& path, std::string* content) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  content->clear();
  char buffer[64 * 1024];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return n == 0;
    }
    content->append(buffer, static_cast<size_t>(n));
  }
}

bool IsFolderRoot(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

bool IsDeviceCodeFile(std::string_view name) {
  if (name.empty() || name.front() == '.') return false;
  for (std::string_view ext : {".cuh", ".cu", ".h", ".hpp", ".inc"}) {
    if (name.size() > ext.size() && name.ends_with(ext)) return true;
  }
  return false;
}

absl::StatusOr<std::string_view> TreeSnapshot::Read(std::string_view relative_path) const {
  auto it = files.find(relative_path);
  if (it == files.end()) {
    return absl::NotFoundError(absl::StrCat("no device-code file '", std::string(relative_path),
                                            "' in the kernels folder ", root,
                                            " (device code lives under include/ and src/)"));
  }
  return std::string_view(it->second);
}

absl::StatusOr<std::unique_ptr<KernelTree>> KernelTree::Open(const std::string& root, WatchMode mode) {
  std::string normalized = root;
  while (normalized.size() > 1 && normalized.back() == '/') normalized.pop_back();
  if (!IsFolderRoot(normalized)) {
    return absl::NotFoundError(absl::StrCat("kernels folder '", root, "' does not exist or is not a folder"));
  }
  std::unique_ptr<KernelTree> tree(new KernelTree());
  tree->root_ = normalized;
  if (mode == WatchMode::kInotify) tree->inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  KILN_ABSL_RETURN_IF_ERROR(tree->Rescan());
  return tree;
}

KernelTree::~KernelTree() { StopInotify(); }

void KernelTree::StopInotify() {
  if (inotify_fd_ >= 0) close(inotify_fd_);
  inotify_fd_ = -1;
  watches_.clear();
}

std::shared_ptr<const TreeSnapshot> KernelTree::Current() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ChangedSinceLastScan() || rescan_pending_) rescan_pending_ = !Rescan().ok();
  return current_;
}

bool KernelTree::ChangedSinceLastScan() {
  if (inotify_fd_ < 0) {
    return StatSignature(WalkTree(root_, [](const std::string&) {})) != stat_signature_;
  }
  bool changed = false;
  alignas(inotify_event) char buffer[16 * 1024];
  for (;;) {
    ssize_t n = read(inotify_fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {  // the descriptor broke: stat walks from now on
      StopInotify();
      return true;
    }
    for (char* p = buffer; p < buffer + n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(p);
      p += sizeof(inotify_event) + event->len;
      std::string_view name = event->len > 0 ? std::string_view(event->name) : std::string_view();
      if (event->mask & IN_Q_OVERFLOW) {
        changed = true;
        continue;
      }
      auto watch = watches_.find(event->wd);
      if (event->mask & IN_IGNORED) {  // its folder is gone; the event before said so
        if (watch != watches_.end()) watches_.erase(watch);
        continue;
      }
      if (watch != watches_.end() && watch->second == root_) {
        // Events on the kernels folder itself matter only for include/ and src/.
        if (name == "include" || name == "src") changed = true;
        continue;
      }
      if (name.empty() || (event->mask & IN_ISDIR) || IsDeviceCodeFile(name)) changed = true;
    }
  }
  return changed;
}

absl::Status KernelTree::Rescan() {
  if (!IsFolderRoot(root_)) {
    return absl::NotFoundError(absl::StrCat("kernels folder ", root_, " vanished"));
  }
  std::set<int> seen;
  auto add_watch = [&](const std::string& folder) {
    if (inotify_fd_ < 0) return;
    int wd = inotify_add_watch(inotify_fd_, folder.c_str(), kWatchMask);
    if (wd < 0) {
      // Out of watches (fs.inotify.max_user_watches) or a file system without inotify.
      if (errno != ENOENT) StopInotify();
      return;
    }
    watches_[wd] = folder;
    seen.insert(wd);
  };
  add_watch(root_);
  std::vector<WalkEntry> entries = WalkTree(root_, add_watch);
  if (inotify_fd_ >= 0) {
    for (auto it = watches_.begin(); it != watches_.end();) {
      if (seen.count(it->first) != 0) {
        ++it;
        continue;
      }
      inotify_rm_watch(inotify_fd_, it->first);  // a folder moved out of the tree
      it = watches_.erase(it);
    }
  } else {
    stat_signature_ = StatSignature(entries);
  }

  auto snapshot = std::make_shared<TreeSnapshot>();
  snapshot->root = root_;
  for (WalkEntry& entry : entries) {
    if (entry.is_dir) continue;
    std::string content;
    // Unreadable or vanished files are left out; a compile that needs one says which.
    if (!ReadWholeFile(entry.absolute, &content)) continue;
    snapshot->files.emplace(std::move(entry.relative), std::move(content));
  }
  Sha256Digest digest;
  for (const auto& [path, content] : snapshot->files) digest.UpdateField(path).UpdateField(content);
  snapshot->digest = digest.FinalHex();
  if (current_ != nullptr && current_->digest == snapshot->digest) return absl::OkStatus();
  snapshot->generation = current_ == nullptr ? 1 : current_->generation + 1;
  current_ = std::move(snapshot);
  return absl::OkStatus();
}

}  // namespace kiln::kernels
