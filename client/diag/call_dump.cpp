#include "client/diag/call_dump.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/devices.h"
#include "client/diag/diag_config.h"
#include "client/diag/safetensors.h"
#include "client/diag/tensor_copy.h"
#include "kiln/version.h"

namespace kiln::client::diag {
namespace {

using Json = nlohmann::ordered_json;

Status Errno(const std::string& what) { return Status(StatusCode::kInternal, what + ": " + std::strerror(errno)); }

std::string NowUtc() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm = {};
  gmtime_r(&seconds, &tm);
  char buffer[80];
  std::snprintf(buffer, sizeof(buffer), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buffer;
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("creating " + tmp);
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Status s = Errno("writing " + tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const Status s = Errno("fsync " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status s = Errno("renaming " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return s;
  }
  return OkStatus();
}

Json DimsJson(const Dim3& d) { return Json::array({d.x, d.y, d.z}); }

// The device the call ran on, as replay compares it: model, arch, SM count.
Json DeviceJson(const OpCall& call) {
  const Device device = call.CallDevice();
  Json j = {{"name", DeviceName(device)}};
  if (device.type == DeviceType::kCPU) return j;
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return j;
  auto info = DescribeDevice(**driver, device.index);
  if (!info.ok()) return j;
  j["model"] = info->name;
  j["arch"] = info->arch();
  j["multiprocessors"] = info->multiprocessors;
  j["driver_version"] = (*driver)->version();
  return j;
}

Json TensorJson(const CallTensor& t) {
  Json shape = Json::array(), strides = Json::array();
  for (int d = 0; d < t.view.ndim && d < kMaxTensorDims; ++d) {
    shape.push_back(t.view.shape[d]);
    strides.push_back(t.view.strides[d]);
  }
  const int64_t n = t.view.numel();
  return {{"name", t.name},
          {"role", RoleName(t.role)},
          {"dtype", DTypeName(t.view.dtype)},
          {"shape", shape},
          {"strides", strides},
          {"device", DeviceName(t.view.device)},
          {"pointer", PointerText(t.view.data)},
          {"align", PointerAlignment(t.view.data)},
          {"bytes", n > 0 ? n * static_cast<int64_t>(DTypeSize(t.view.dtype)) : 0}};
}

// Every KILN_* variable of the process: the controls (debug compiles, forced algorithms, ...)
// a reproduction needs besides the call itself.
Json EnvironmentJson() {
  Json env = Json::object();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (entry.rfind("KILN_", 0) == 0 && eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

Json MetaJson(const OpCall& call, const std::string& status) {
  Json params = Json::object();
  for (const auto& [k, v] : call.params) params[k] = v;
  Json tensors = Json::array();
  for (const auto& t : call.tensors) tensors.push_back(TensorJson(t));
  Json kernels = Json::array();
  for (const auto& k : call.kernels) {
    Json kj = {{"uri", k.uri},
               {"cache_key", k.cache_key},
               {"arch", k.arch},
               {"entry", k.entry},
               {"grid", DimsJson(k.config.grid)},
               {"block", DimsJson(k.config.block)},
               {"dynamic_smem", k.config.dynamic_smem_bytes}};
    if (k.config.cluster.x > 0) kj["cluster"] = DimsJson(k.config.cluster);
    if (!k.backend.empty()) kj["backend"] = k.backend;
    kernels.push_back(kj);
  }
  return {{"format", kDumpFormat},
          {"status", status},
          {"call", call.id},
          {"op", call.op},
          {"api", call.api},
          {"params", params},
          {"tensors", tensors},
          {"kernels", kernels},
          {"device", DeviceJson(call)},
          {"stream", PointerText(call.stream)},
          {"pid", static_cast<int64_t>(::getpid())},
          {"tid", static_cast<int64_t>(::syscall(SYS_gettid))},
          {"time", NowUtc()},
          {"kiln_version", KILN_VERSION_STRING},
          {"environment", EnvironmentJson()}};
}

// One safetensors file of the call's tensors whose role passes `want`.
template <typename Want>
Status WriteTensors(const OpCall& call, const std::string& path, Want&& want) {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata = {{"kiln.format", kDumpFormat},
                                                 {"kiln.op", call.op},
                                                 {"kiln.api", call.api},
                                                 {"kiln.call", std::to_string(call.id)}};
  std::vector<const CallTensor*> chosen;
  for (const auto& t : call.tensors) {
    if (!want(t)) continue;
    SafetensorsEntry e;
    e.name = t.name;
    e.dtype = t.view.dtype;
    std::string strides = "[";
    for (int d = 0; d < t.view.ndim; ++d) {
      e.shape.push_back(t.view.shape[d]);
      strides += (d ? "," : "") + std::to_string(t.view.strides[d]);
    }
    metadata[t.name + ".strides"] = strides + "]";
    metadata[t.name + ".pointer"] = PointerText(t.view.data);
    metadata[t.name + ".device"] = DeviceName(t.view.device);
    metadata[t.name + ".role"] = RoleName(t.role);
    entries.push_back(std::move(e));
    chosen.push_back(&t);
  }
  KILN_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, std::move(entries), metadata));
  for (const CallTensor* t : chosen) {
    auto bytes = ReadTensor(t->view, call.stream);
    if (!bytes.ok()) return bytes.status().WithContext("reading " + t->name);
    KILN_RETURN_IF_ERROR(writer.Append(*bytes));
  }
  return writer.Commit();
}

std::string Human(int64_t bytes) {
  char buffer[32];
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(buffer, sizeof(buffer), "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (1 << 20))
    std::snprintf(buffer, sizeof(buffer), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else std::snprintf(buffer, sizeof(buffer), "%lld B", static_cast<long long>(bytes));
  return buffer;
}

}  // namespace

Status MakeFolders(const std::string& path) {
  if (path.empty()) return InvalidArgument("an empty folder path");
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return Errno("creating " + prefix);
    if (slash == std::string::npos) break;
  }
  struct stat st = {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status(StatusCode::kFailedPrecondition, path + " is not a folder");
  return OkStatus();
}

Status SynchronizeCallStream(const OpCall& call) {
  bool device_memory = false;
  for (const auto& t : call.tensors) device_memory |= t.view.device.type != DeviceType::kCPU;
  if (!device_memory) return OkStatus();
  KILN_ASSIGN_OR_RETURN(auto driver, CudaDriver::Get());
  return driver->Check(driver->cuStreamSynchronize(static_cast<CUstream>(call.stream)), "cuStreamSynchronize");
}

CallDumper& CallDumper::Global() {
  static CallDumper* dumper = new CallDumper(Config().dump_dir, Config().dump_max_count, Config().dump_max_bytes);
  return *dumper;
}

CallDumper::CallDumper(std::string root, int64_t max_count, int64_t max_bytes)
    : root_(std::move(root)), max_count_(max_count), max_bytes_(max_bytes) {}

Status CallDumper::EnsureRoot() {
  if (root_ready_) return OkStatus();
  KILN_RETURN_IF_ERROR(MakeFolders(root_));
  if (::access(root_.c_str(), W_OK | X_OK) != 0) return Errno(root_ + " is not writable");
  root_ready_ = true;
  return OkStatus();
}

std::string CallDumper::BeginCall(const OpCall& call, std::string* note) {
  note->clear();
  const int64_t bytes = call.TensorBytes();
  std::string folder;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return "";
    if (count_ + 1 > max_count_) {
      stopped_ = true;
      *note = "dumps stopped: KILN_DUMP_MAX_COUNT=" + std::to_string(max_count_) +
              " calls dumped; no later call is dumped";
      return "";
    }
    if (bytes_ + bytes > max_bytes_) {
      stopped_ = true;
      *note = "dumps stopped: this call's " + Human(bytes) +
              " of tensors would pass KILN_DUMP_MAX_BYTES=" + std::to_string(max_bytes_) + " (" + Human(bytes_) +
              " written); no later call is dumped";
      return "";
    }
    if (Status s = EnsureRoot(); !s.ok()) {
      stopped_ = true;
      *note = "dumps stopped: KILN_DUMP_DIR=" + root_ + ": " + s.message();
      return "";
    }
    ++count_;
    bytes_ += bytes;
  }
  char name[64];
  std::snprintf(name, sizeof(name), "%06llu_%d_", static_cast<unsigned long long>(call.id),
                static_cast<int>(::getpid()));
  folder = root_ + "/" + name + call.op;
  if (::mkdir(folder.c_str(), 0700) != 0) {
    *note = "dump failed: creating " + folder + ": " + std::strerror(errno);
    return "";
  }
  Status s = WriteFileAtomically(folder + "/meta.json", MetaJson(call, "started").dump(2) + "\n");
  if (s.ok()) s = WriteTensors(call, folder + "/inputs.safetensors", [](const CallTensor& t) { return t.IsInput(); });
  if (!s.ok()) {
    *note = "dump " + folder + ": inputs not written: " + s.ToString();
    return folder;  // meta.json says "started"; the end of the call still records what happened
  }
  *note = "dump " + folder + ": inputs written";
  return folder;
}

std::string CallDumper::FinishCall(const OpCall& call, const std::string& folder, const Status& result) {
  Json meta = MetaJson(call, "completed");
  meta["result"] = {{"code", StatusCodeName(result.code())}, {"message", result.message()}};
  std::string note;
  if (result.ok()) {
    Status s = SynchronizeCallStream(call);  // the launch's own errors show here
    if (s.ok())
      s = WriteTensors(call, folder + "/outputs.safetensors", [](const CallTensor& t) { return t.IsOutput(); });
    if (s.ok()) {
      meta["outputs"] = "outputs.safetensors";
      note = "dump " + folder + ": outputs written, call completed";
    } else {
      meta["outputs_error"] = s.ToString();
      note = "dump " + folder + ": outputs not written: " + s.ToString();
    }
  } else {
    note = "dump " + folder + ": call completed with " + StatusCodeName(result.code()) + ", no outputs";
  }
  if (Status s = WriteFileAtomically(folder + "/meta.json", meta.dump(2) + "\n"); !s.ok())
    note += "; meta.json not rewritten: " + s.ToString();
  return note;
}

}  // namespace kiln::client::diag
