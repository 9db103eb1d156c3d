#include "kernels/jit/generation_workspace.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "tests/support/temp_dir.h"

namespace kiln::kernels {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

struct FileStamp {
  ino_t inode = 0;
  timespec mtime{};
};

FileStamp Stamp(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return {st.st_ino, st.st_mtim};
}

// Sets an mtime far in the past: a rewrite of the file, however fast, would change it.
void Backdate(const std::string& path) {
  timespec times[2] = {{946684800, 0}, {946684800, 0}};  // 2000-01-01
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

bool SameStamp(const FileStamp& a, const FileStamp& b) {
  return a.inode == b.inode && a.mtime.tv_sec == b.mtime.tv_sec && a.mtime.tv_nsec == b.mtime.tv_nsec;
}

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST_CASE("WriteIfDifferent writes new and changed content, and leaves equal content alone", "[workspace]") {
  TempDir dir("kiln-gen");
  const std::string path = dir / "config.cuh";

  auto wrote = WriteIfDifferent(path, "v1");
  REQUIRE(wrote.ok());
  CHECK(*wrote);
  CHECK(ReadFile(path) == "v1");

  Backdate(path);
  const FileStamp before = Stamp(path);
  wrote = WriteIfDifferent(path, "v1");
  REQUIRE(wrote.ok());
  CHECK(!*wrote);
  CHECK(SameStamp(Stamp(path), before));

  wrote = WriteIfDifferent(path, "v2");
  REQUIRE(wrote.ok());
  CHECK(*wrote);
  CHECK(ReadFile(path) == "v2");
  CHECK(!SameStamp(Stamp(path), before));
  // Same length, other bytes; and an empty file.
  CHECK(*WriteIfDifferent(path, "v3"));
  CHECK(ReadFile(path) == "v3");
  CHECK(*WriteIfDifferent(path, ""));
  CHECK(ReadFile(path).empty());
  CHECK(!*WriteIfDifferent(path, ""));
  CHECK(FilesIn(dir.path()) == 1);  // no temporary file left behind
  struct stat st {};
  stat(path.c_str(), &st);
  CHECK((st.st_mode & 0444) == 0444);  // readable like a source file
}

TEST_CASE("WriteIfDifferent reports a folder it cannot write", "[workspace]") {
  TempDir dir("kiln-gen");
  WriteFile(dir / "file", "x");
  auto wrote = WriteIfDifferent(dir / "file/sub/config.cuh", "v1");  // a file as a folder
  CHECK(!wrote.ok());
  CHECK(std::string(wrote.status().message()).find(dir / "file") != std::string::npos);
}

JitSpec SmallSpec() {
  JitSpec spec;
  spec.op = "rmsnorm";
  spec.uri = "rmsnorm_bf16_h4096";
  spec.headers.push_back({"kiln_config.cuh", "#define X 1\n", SourceFile::Origin::kGenerated, ""});
  spec.units.push_back({"rmsnorm.cu", "// unit\n", SourceFile::Origin::kKernels, "src/norm/rmsnorm.cu"});
  return spec;
}

TEST_CASE("MaterializeSpec writes one folder per URI, and only what changed", "[workspace]") {
  TempDir dir("kiln-gen");
  const std::string gen_dir = dir / "gen/nested";  // created when missing
  JitSpec spec = SmallSpec();
  auto folder = MaterializeSpec(spec, gen_dir);
  REQUIRE(folder.ok());
  CHECK(*folder == gen_dir + "/rmsnorm_bf16_h4096");
  CHECK(ReadFile(*folder + "/kiln_config.cuh") == "#define X 1\n");
  CHECK(ReadFile(*folder + "/rmsnorm.cu") == "// unit\n");

  Backdate(*folder + "/kiln_config.cuh");
  Backdate(*folder + "/rmsnorm.cu");
  const FileStamp config = Stamp(*folder + "/kiln_config.cuh");
  const FileStamp unit = Stamp(*folder + "/rmsnorm.cu");
  REQUIRE(MaterializeSpec(spec, gen_dir).ok());
  CHECK(SameStamp(Stamp(*folder + "/kiln_config.cuh"), config));
  CHECK(SameStamp(Stamp(*folder + "/rmsnorm.cu"), unit));

  spec.headers[0].content = "#define X 2\n";
  REQUIRE(MaterializeSpec(spec, gen_dir).ok());
  CHECK(ReadFile(*folder + "/kiln_config.cuh") == "#define X 2\n");
  CHECK(!SameStamp(Stamp(*folder + "/kiln_config.cuh"), config));
  CHECK(SameStamp(Stamp(*folder + "/rmsnorm.cu"), unit));

  JitSpec other = SmallSpec();
  other.uri = "rmsnorm_fp16_h4096";
  REQUIRE(MaterializeSpec(other, gen_dir).ok());
  CHECK(FilesIn(gen_dir) == 2);
}

TEST_CASE("MaterializeSpec refuses names that would leave the workspace", "[workspace]") {
  TempDir dir("kiln-gen");
  for (const char* uri : {"../escape", "a/b", "..", "", "."}) {
    JitSpec spec = SmallSpec();
    spec.uri = uri;
    INFO(uri);
    CHECK(MaterializeSpec(spec, dir.path()).status().code() == absl::StatusCode::kInvalidArgument);
  }
  JitSpec spec = SmallSpec();
  spec.units[0].name = "../evil.cu";
  CHECK(MaterializeSpec(spec, dir.path()).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(!fs::exists(dir.path() + "/evil.cu"));
}

}  // namespace
}  // namespace kiln::kernels
