// TempDir: a fresh folder under $TMPDIR (or /tmp) removed with everything in it at scope exit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

namespace kiln::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "kiln-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& child) const { return path_ + "/" + child; }

 private:
  std::string path_;
};

// Recursively makes every file and folder under `path` writable again (for cleanup after a
// test that made a tree read-only) and removes it.
void RemoveTree(const std::string& path);

// Every file and folder under `root` with its size and modification time: equal snapshots
// before and after mean nothing was written there.
using FileTreeSnapshot = std::map<std::string, std::pair<uintmax_t, std::filesystem::file_time_type>>;
FileTreeSnapshot SnapshotTree(const std::string& root);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);

}  // namespace kiln::testing
