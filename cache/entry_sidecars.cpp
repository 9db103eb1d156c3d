#include "cache/entry_sidecars.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "cache/file_io.h"
#include "kiln_base/status_macros.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kSidecarVersion = 1;
constexpr const char* kSuffix = ".json";

}  // namespace

std::string SidecarJson(const EntryRecord& r) {
  Json params = Json::object();
  for (const auto& [name, value] : r.params) params[name] = value;
  Json j = {{"sidecar_version", kSidecarVersion},
            {"key", r.key},
            {"uri", r.uri},
            {"op", r.op},
            {"params", params},
            {"arch", r.arch},
            {"options", r.options},
            {"sha256", r.sha256},
            {"size_bytes", r.size_bytes},
            {"format_version", r.format_version},
            {"kiln_version", r.kiln_version},
            {"nvrtc_version", r.nvrtc_version},
            {"nvjitlink_version", r.nvjitlink_version},
            {"cuda_headers_version", r.cuda_headers_version},
            {"created_unix_ms", r.created_unix_ms},
            {"compile_ms", r.compile_ms},
            {"job_id", r.job_id},
            {"kernels_json", r.kernels_json},
            {"launch_json", r.launch_json},
            {"manifest_json", r.manifest_json}};
  // NOTES: error_handler replace keeps a non-UTF-8 option from throwing, as the index row does.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::StatusOr<EntryRecord> ParseSidecar(const std::string& text, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("entry sidecar ", path, " is unusable: ", why));
  };
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("sidecar_version") || !j["sidecar_version"].is_number_integer() ||
      j["sidecar_version"].get<int>() != kSidecarVersion)
    return bad(absl::StrCat("sidecar_version is not ", kSidecarVersion));
  EntryRecord r;
  try {
    r.key = j.at("key").get<std::string>();
    r.uri = j.at("uri").get<std::string>();
    r.op = j.at("op").get<std::string>();
    for (const auto& [name, value] : j.at("params").items()) r.params[name] = value.get<std::string>();
    r.arch = j.at("arch").get<std::string>();
    r.options = j.at("options").get<std::vector<std::string>>();
    r.sha256 = j.at("sha256").get<std::string>();
    r.size_bytes = j.at("size_bytes").get<uint64_t>();
    r.format_version = j.at("format_version").get<uint32_t>();
    r.kiln_version = j.at("kiln_version").get<std::string>();
    r.nvrtc_version = j.at("nvrtc_version").get<std::string>();
    r.nvjitlink_version = j.at("nvjitlink_version").get<std::string>();
    r.cuda_headers_version = j.at("cuda_headers_version").get<std::string>();
    r.created_unix_ms = j.at("created_unix_ms").get<int64_t>();
    r.compile_ms = j.at("compile_ms").get<double>();
    r.job_id = j.at("job_id").get<std::string>();
    r.kernels_json = j.at("kernels_json").get<std::string>();
    r.launch_json = j.at("launch_json").get<std::string>();
    r.manifest_json = j.at("manifest_json").get<std::string>();
  } catch (const Json::exception& e) {
    return bad(e.what());
  }
  r.last_used_unix_ms = r.created_unix_ms;
  return r;
}

std::string EntrySidecars::PathOf(const std::string& key) const {
  return absl::StrCat(dir_, "/entries/", key.substr(0, 2), "/", key, kSuffix);
}

absl::Status EntrySidecars::Write(const EntryRecord& record) const {
  const std::string final_path = PathOf(record.key);
  KILN_ABSL_RETURN_IF_ERROR(file_io::MakeDirs(fs::path(final_path).parent_path().string()));
  // A temp of the blob store's form, so that SweepStaleTemps removes one a killed writer left.
  const std::string temp = blobs_->NewTempPath(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) {  // tmp/ is gone
    KILN_ABSL_RETURN_IF_ERROR(blobs_->Recreate("tmp"));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (fd < 0) return file_io::ErrnoStatus(errno, absl::StrCat("create temp file ", temp));
  ::flock(fd, LOCK_EX | LOCK_NB);
  auto fail = [&](absl::Status status) {
    ::unlink(temp.c_str());
    ::close(fd);
    return status;
  };
  if (auto status = file_io::WriteAll(fd, SidecarJson(record), temp); !status.ok()) return fail(status);
  if (::fsync(fd) != 0) return fail(file_io::ErrnoStatus(errno, absl::StrCat("fsync ", temp)));
  if (::rename(temp.c_str(), final_path.c_str()) != 0)
    return fail(file_io::ErrnoStatus(errno, absl::StrCat("rename ", temp, " to ", final_path)));
  ::close(fd);
  return absl::OkStatus();
}

absl::Status EntrySidecars::Remove(const std::string& key) const {
  const std::string path = PathOf(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return file_io::ErrnoStatus(errno, absl::StrCat("remove entry sidecar ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EntrySidecars::Found>> EntrySidecars::List() const {
  std::vector<Found> out;
  const std::string root = dir_ + "/entries";
  std::error_code ec;
  for (fs::directory_iterator fan(root, ec), end; !ec && fan != end; fan.increment(ec)) {
    if (!fan->is_directory(ec)) continue;
    std::error_code inner;
    for (fs::directory_iterator it(fan->path(), inner); !inner && it != end; it.increment(inner)) {
      const std::string name = it->path().filename().string();
      if (name.size() <= std::string_view(kSuffix).size() || !name.ends_with(kSuffix)) continue;
      struct stat st {};
      if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // gone meanwhile
      Found found;
      found.key = name.substr(0, name.size() - std::string_view(kSuffix).size());
      found.path = it->path().string();
      found.bytes = static_cast<uint64_t>(st.st_size);
      found.modified = std::chrono::system_clock::from_time_t(st.st_mtime);
      out.push_back(std::move(found));
    }
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    return absl::UnavailableError(absl::StrCat("cannot list entry sidecars under ", root, ": ", ec.message()));
  return out;
}

absl::StatusOr<uint64_t> EntrySidecars::Bytes() const {
  KILN_ABSL_ASSIGN_OR_RETURN(std::vector<Found> all, List());
  uint64_t total = 0;
  for (const Found& f : all) total += f.bytes;
  return total;
}

}  // namespace kiln::cache
