#include "kernels/jit/kernel_tree.h"

#include <stdio.h>
#include <sys/stat.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"

namespace kiln::kernels {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteFile;

void MakeTree(const std::string& root) {
  WriteFile(root + "/include/kiln/a.cuh", "// a\n");
  WriteFile(root + "/include/kiln/sub/b.h", "// b\n");
  WriteFile(root + "/src/norm/c.cu", "// c\n");
  WriteFile(root + "/include/README.md", "not device code");
  WriteFile(root + "/include/kiln/.a.cuh.swp", "editor swap file");
  WriteFile(root + "/ops/norm/generator.cpp", "host code");
  WriteFile(root + "/CMakeLists.txt", "build");
}

std::unique_ptr<KernelTree> OpenTree(const std::string& root, KernelTree::WatchMode mode) {
  auto tree = KernelTree::Open(root, mode);
  REQUIRE(tree.ok());
  return std::move(*tree);
}

std::string FileOf(const TreeSnapshot& snapshot, const std::string& path) {
  auto content = snapshot.Read(path);
  return content.ok() ? std::string(*content) : "<missing>";
}

// The content of every file under `root` with its inode and mtime: equal before and after
// means nothing was written there.
std::string Fingerprint(const std::string& root) {
  std::string out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    struct stat st {};
    lstat(entry.path().c_str(), &st);
    out += entry.path().string() + " " + std::to_string(st.st_ino) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + "\n";
  }
  return out;
}

const KernelTree::WatchMode kBothModes[] = {KernelTree::WatchMode::kInotify, KernelTree::WatchMode::kStatWalk};

TEST_CASE("a snapshot holds the device code of include/ and src/ and nothing else", "[tree]") {
  TempDir dir("kiln-tree");
  MakeTree(dir.path());
  auto tree = OpenTree(dir.path(), KernelTree::WatchMode::kInotify);
  CHECK(tree->using_inotify());
  auto snapshot = tree->Current();
  std::vector<std::string> paths;
  for (const auto& [path, content] : snapshot->files) paths.push_back(path);
  CHECK(paths == std::vector<std::string>{"include/kiln/a.cuh", "include/kiln/sub/b.h", "src/norm/c.cu"});
  CHECK(FileOf(*snapshot, "include/kiln/a.cuh") == "// a\n");
  CHECK(snapshot->digest.size() == 64);
  CHECK(snapshot->generation == 1);
  CHECK(snapshot->root == dir.path());
}

TEST_CASE("TreeSnapshot::Read names the missing path and the kernels folder", "[tree]") {
  TempDir dir("kiln-tree");
  MakeTree(dir.path());
  auto snapshot = OpenTree(dir.path(), KernelTree::WatchMode::kInotify)->Current();
  auto missing = snapshot->Read("src/none.cu");
  REQUIRE(!missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  std::string message(missing.status().message());
  CHECK(message.find("src/none.cu") != std::string::npos);
  CHECK(message.find(dir.path()) != std::string::npos);
}

TEST_CASE("the digest covers relative paths and contents, not where the tree lies", "[tree]") {
  TempDir a("kiln-tree"), b("kiln-tree");
  MakeTree(a.path());
  MakeTree(b.path());
  std::string digest_a = OpenTree(a.path(), KernelTree::WatchMode::kInotify)->Current()->digest;
  CHECK(OpenTree(b.path(), KernelTree::WatchMode::kStatWalk)->Current()->digest == digest_a);

  WriteFile(b.path() + "/include/kiln/a.cuh", "// A\n");  // same size, other bytes
  CHECK(OpenTree(b.path(), KernelTree::WatchMode::kInotify)->Current()->digest != digest_a);

  TempDir c("kiln-tree");
  MakeTree(c.path());
  fs::rename(c.path() + "/include/kiln/a.cuh", c.path() + "/include/kiln/z.cuh");  // same bytes, other path
  CHECK(OpenTree(c.path(), KernelTree::WatchMode::kInotify)->Current()->digest != digest_a);

  // Files outside include/ and src/ do not count.
  WriteFile(a.path() + "/ops/norm/generator.cpp", "changed host code");
  WriteFile(a.path() + "/include/NOTES.txt", "changed notes");
  CHECK(OpenTree(a.path(), KernelTree::WatchMode::kInotify)->Current()->digest == digest_a);
}

TEST_CASE("an edit is seen by the very next Current() call, without waiting", "[tree]") {
  for (KernelTree::WatchMode mode : kBothModes) {
    TempDir dir("kiln-tree");
    MakeTree(dir.path());
    auto tree = OpenTree(dir.path(), mode);
    auto first = tree->Current();
    std::string last_digest = first->digest;
    uint64_t last_generation = first->generation;
    for (int i = 0; i < 50; ++i) {
      // The stat walk sees a change through size or time stamps; the time stamps tick
      // coarsely, so each edit here also changes the size. inotify needs no such help.
      std::string content = "// edit " + std::string(i + 1, 'x') + "\n";
      WriteFile(dir.path() + "/include/kiln/a.cuh", content);
      auto snapshot = tree->Current();
      INFO("mode " << int(mode) << " edit " << i);
      REQUIRE(FileOf(*snapshot, "include/kiln/a.cuh") == content);
      CHECK(snapshot->digest != last_digest);
      CHECK(snapshot->generation == last_generation + 1);
      last_digest = snapshot->digest;
      last_generation = snapshot->generation;
    }
    // The first snapshot stays valid and unchanged while held.
    CHECK(FileOf(*first, "include/kiln/a.cuh") == "// a\n");
    // No change: the same snapshot object comes back.
    CHECK(tree->Current() == tree->Current());
  }
}

TEST_CASE("inotify sees same-size edits in quick succession", "[tree]") {
  TempDir dir("kiln-tree");
  MakeTree(dir.path());
  auto tree = OpenTree(dir.path(), KernelTree::WatchMode::kInotify);
  REQUIRE(tree->using_inotify());
  for (int i = 0; i < 100; ++i) {
    std::string content = "// v" + std::to_string(1000 + i) + "\n";  // always 8 bytes
    WriteFile(dir.path() + "/src/norm/c.cu", content);
    REQUIRE(FileOf(*tree->Current(), "src/norm/c.cu") == content);
  }
}

TEST_CASE("an atomic replace (write a temp file, rename it over) is seen", "[tree]") {
  for (KernelTree::WatchMode mode : kBothModes) {
    TempDir dir("kiln-tree");
    MakeTree(dir.path());
    auto tree = OpenTree(dir.path(), mode);
    tree->Current();
    WriteFile(dir.path() + "/include/kiln/.a.cuh.tmp", "// replaced by rename\n");
    REQUIRE(rename((dir.path() + "/include/kiln/.a.cuh.tmp").c_str(), (dir.path() + "/include/kiln/a.cuh").c_str()) ==
            0);
    CHECK(FileOf(*tree->Current(), "include/kiln/a.cuh") == "// replaced by rename\n");
  }
}

TEST_CASE("a new file in a new subfolder is seen at once, and later edits in it too", "[tree]") {
  for (KernelTree::WatchMode mode : kBothModes) {
    TempDir dir("kiln-tree");
    MakeTree(dir.path());
    auto tree = OpenTree(dir.path(), mode);
    tree->Current();
    WriteFile(dir.path() + "/include/kiln/new/deeper/n.cuh", "// new\n");
    auto snapshot = tree->Current();
    CHECK(FileOf(*snapshot, "include/kiln/new/deeper/n.cuh") == "// new\n");
    WriteFile(dir.path() + "/include/kiln/new/deeper/n.cuh", "// new, edited\n");
    CHECK(FileOf(*tree->Current(), "include/kiln/new/deeper/n.cuh") == "// new, edited\n");
    WriteFile(dir.path() + "/include/kiln/new/second.cuh", "// second\n");
    CHECK(FileOf(*tree->Current(), "include/kiln/new/second.cuh") == "// second\n");
  }
}

TEST_CASE("deleted files and folders leave the snapshot at once", "[tree]") {
  for (KernelTree::WatchMode mode : kBothModes) {
    TempDir dir("kiln-tree");
    MakeTree(dir.path());
    auto tree = OpenTree(dir.path(), mode);
    tree->Current();
    fs::remove(dir.path() + "/src/norm/c.cu");
    CHECK(tree->Current()->files.count("src/norm/c.cu") == 0);
    fs::remove_all(dir.path() + "/include/kiln/sub");
    CHECK(tree->Current()->files.count("include/kiln/sub/b.h") == 0);
    // A folder re-created under the same name is watched again.
    WriteFile(dir.path() + "/include/kiln/sub/b.h", "// back\n");
    CHECK(FileOf(*tree->Current(), "include/kiln/sub/b.h") == "// back\n");
    WriteFile(dir.path() + "/include/kiln/sub/b.h", "// back again\n");
    CHECK(FileOf(*tree->Current(), "include/kiln/sub/b.h") == "// back again\n");
  }
}

TEST_CASE("include/ or src/ created after Open is picked up", "[tree]") {
  TempDir dir("kiln-tree");
  auto tree = OpenTree(dir.path(), KernelTree::WatchMode::kInotify);
  CHECK(tree->Current()->files.empty());
  WriteFile(dir.path() + "/src/late.cu", "// late\n");
  CHECK(FileOf(*tree->Current(), "src/late.cu") == "// late\n");
}

TEST_CASE("a read-only tree opens, stays current and is never written", "[tree]") {
  TempDir dir("kiln-tree");
  const std::string root = dir.path() + "/kernels";
  fs::copy(KILN_TEST_KERNELS_DIR, root, fs::copy_options::recursive);
  auto make_read_only = [&](bool read_only) {
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      fs::permissions(entry.path(), fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                      read_only ? fs::perm_options::remove : fs::perm_options::add);
    }
    fs::permissions(root, fs::perms::owner_write, read_only ? fs::perm_options::remove : fs::perm_options::add);
  };
  make_read_only(true);
  const std::string before = Fingerprint(root);
  for (KernelTree::WatchMode mode : kBothModes) {
    auto tree = OpenTree(root, mode);
    auto snapshot = tree->Current();
    CHECK(snapshot->files.count("src/norm/rmsnorm.cu") == 1);
    CHECK(snapshot->files.count("include/kiln/norm/rmsnorm.cuh") == 1);
    CHECK(tree->Current() == snapshot);
  }
  CHECK(Fingerprint(root) == before);
  // The owner (an operator deploying a new version) may still change it; the tree sees it.
  auto tree = OpenTree(root, KernelTree::WatchMode::kInotify);
  tree->Current();
  make_read_only(false);
  WriteFile(root + "/include/kiln/norm/rmsnorm.cuh", "// replaced\n");
  CHECK(FileOf(*tree->Current(), "include/kiln/norm/rmsnorm.cuh") == "// replaced\n");
}

TEST_CASE("Open refuses a missing folder or a file", "[tree]") {
  TempDir dir("kiln-tree");
  auto missing = KernelTree::Open(dir.path() + "/nothing");
  REQUIRE(!missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find(dir.path() + "/nothing") != std::string::npos);
  WriteFile(dir.path() + "/file", "x");
  CHECK(KernelTree::Open(dir.path() + "/file").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("concurrent Current() calls during edits always return whole snapshots", "[tree]") {
  TempDir dir("kiln-tree");
  MakeTree(dir.path());
  auto tree = OpenTree(dir.path(), KernelTree::WatchMode::kInotify);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        auto snapshot = tree->Current();
        if (snapshot == nullptr || snapshot->files.count("include/kiln/sub/b.h") != 1) ++bad;
      }
    });
  }
  for (int i = 0; i < 200; ++i) WriteFile(dir.path() + "/include/kiln/a.cuh", "// " + std::to_string(i) + "\n");
  stop = true;
  for (auto& reader : readers) reader.join();
  CHECK(bad == 0);
  CHECK(FileOf(*tree->Current(), "include/kiln/a.cuh") == "// 199\n");
}

TEST_CASE("the repository's kernels tree holds the rmsnorm family", "[tree]") {
  auto tree = OpenTree(KILN_TEST_KERNELS_DIR, KernelTree::WatchMode::kInotify);
  auto snapshot = tree->Current();
  CHECK(snapshot->files.count("src/norm/rmsnorm.cu") == 1);
  CHECK(snapshot->files.count("include/kiln/norm/rmsnorm.cuh") == 1);
  CHECK(snapshot->files.count("include/kiln/common/vec.cuh") == 1);
  for (const auto& [path, content] : snapshot->files) {
    INFO(path);
    CHECK((path.starts_with("include/") || path.starts_with("src/")));
  }
}

}  // namespace
}  // namespace kiln::kernels
