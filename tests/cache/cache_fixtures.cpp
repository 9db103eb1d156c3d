// Cache fixtures: sample entries and file damage.
#include "tests/cache/cache_fixtures.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>

#include "cache/sha256.h"

namespace kiln::cache::testing {

std::string KeyFor(const std::string& name) { return Sha256Hex("test-key:" + name); }

std::string FakeCubin(const std::string& seed, size_t size) {
  std::string out = "\x7f"
                    "ELF fake cubin for " +
                    seed + "\n";
  std::string block = Sha256Hex(seed);
  while (out.size() < size) {
    out += block;
    block = Sha256Hex(block);
  }
  out.resize(size);
  return out;
}

EntryRecord MakeRecord(const std::string& key, const std::string& uri, const std::string& op, const std::string& arch) {
  EntryRecord r;
  r.key = key;
  r.uri = uri;
  r.op = op;
  r.params = {{"dtype", "bf16"}, {"hidden", "4096"}, {"quote\"and\\slash", "ü\n"}};
  r.arch = arch;
  r.options = {"-std=c++17", "-DKILN_TILE=128", "--use_fast_math"};
  r.format_version = kCacheFormatVersion;
  r.kiln_version = "0.1.0";
  r.nvrtc_version = "13.0";
  r.nvjitlink_version = "13.0";
  r.cuda_headers_version = "13000";
  r.hit_count = 0;
  r.compile_ms = 42.5;
  r.job_id = "job-" + key.substr(0, 8);
  r.kernels_json = R"([{"name":"rmsnorm_kernel","registers":32}])";
  r.launch_json = R"({"block":256})";
  r.manifest_json = R"({"sources":[{"name":"rmsnorm.cu"}]})";
  r.compile_log = "ptxas info: Used 32 registers\n";
  return r;
}

EntryFilter Filter(std::string op, std::string uri_prefix, std::string arch, std::vector<std::string> keys) {
  EntryFilter filter;
  filter.op = std::move(op);
  filter.uri_prefix = std::move(uri_prefix);
  filter.arch = std::move(arch);
  filter.keys = std::move(keys);
  return filter;
}

Compatibility CompatibilityOf(const EntryRecord& r) {
  Compatibility c;
  c.uri = r.uri;
  c.arch = r.arch;
  c.options = r.options;
  c.format_version = r.format_version;
  c.kiln_version = r.kiln_version;
  c.nvrtc_version = r.nvrtc_version;
  c.nvjitlink_version = r.nvjitlink_version;
  return c;
}

void FlipByte(const std::string& path, size_t offset) {
  ::chmod(path.c_str(), 0644);
  int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) throw std::runtime_error("FlipByte: cannot open " + path);
  unsigned char byte = 0;
  if (::pread(fd, &byte, 1, static_cast<off_t>(offset)) != 1) {
    ::close(fd);
    throw std::runtime_error("FlipByte: cannot read " + path);
  }
  byte ^= 0x01;
  bool ok = ::pwrite(fd, &byte, 1, static_cast<off_t>(offset)) == 1;
  ::close(fd);
  if (!ok) throw std::runtime_error("FlipByte: cannot write " + path);
}

void MakeOld(const std::string& path, std::chrono::seconds age) {
  timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= age.count();
  times[1] = times[0];
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0)
    throw std::runtime_error("MakeOld: cannot set the time of " + path);
}

}  // namespace kiln::cache::testing
