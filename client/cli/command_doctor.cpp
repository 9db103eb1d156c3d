// kiln doctor: is this node ready for Kiln? The toolchain kilnd compiles with, the GPUs the
// client would launch on, the workspaces, the daemon, and the mode a process here would use
// (KILN_MODE: the daemon, or the embedded engine when none runs).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>

#include <grpcpp/grpcpp.h>

#include "client/cli/command.h"
#include "client/cli/output.h"
#include "client/cli/toolchain_probe.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/devices.h"
#include "client/core/rpc/daemon_connection.h"
#include "client/core/rpc/embedded_fetch.h"
#include "client/core/rpc/kernel_source.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "proto/endpoint.h"

namespace kiln::cli {
namespace {

class Report {
 public:
  explicit Report(std::ostream& out) : out_(out) {}
  void Section(const std::string& name) { out_ << (first_ ? "" : "\n") << name << "\n", first_ = false; }
  void Ok(const std::string& text) { Line("ok  ", text); }
  void Warn(const std::string& text) { Line("warn", text); }
  void Problem(const std::string& text) {
    Line("FAIL", text);
    ++problems_;
  }
  void Info(const std::string& text) { Line("    ", text); }
  int problems() const { return problems_; }

 private:
  void Line(const char* tag, const std::string& text) { out_ << "  " << tag << "  " << text << "\n"; }
  std::ostream& out_;
  bool first_ = true;
  int problems_ = 0;
};

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

void CheckWorkspace(Report& r, const std::string& label, const std::string& dir, const std::string& source) {
  const std::string what = label + " " + dir + " (" + source + ")";
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return r.Problem(what + ": exists but is not a folder");
    if (access(dir.c_str(), W_OK | X_OK) != 0)
      return r.Problem(what + ": not writable by uid " + std::to_string(geteuid()) + " (" + std::strerror(errno) + ")");
    return r.Ok(what + ": writable");
  }
  // Not there yet: kilnd creates it when the nearest existing parent lets it.
  std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  while (!parent.empty() && stat(parent.c_str(), &st) != 0) parent = parent.parent_path();
  if (parent.empty()) parent = "/";
  if (access(parent.c_str(), W_OK | X_OK) == 0)
    return r.Ok(what + ": does not exist yet; can be created under " + parent.string());
  r.Problem(what + ": does not exist, and " + parent.string() + " is not writable by uid " + std::to_string(geteuid()));
}

int RunDoctor(Invocation& inv) {
  Report r(inv.out);

  r.Section("toolchain (what kilnd compiles with)");
  const std::string cuda_home = CudaHome();
  Probe nvrtc = ProbeNvrtc(cuda_home);
  if (nvrtc.found) r.Ok("NVRTC " + nvrtc.version + " (" + nvrtc.where + ")");
  else r.Problem("NVRTC not found: " + nvrtc.error);
  Probe nvjitlink = ProbeNvJitLink(cuda_home);
  if (nvjitlink.found) r.Ok("nvJitLink " + nvjitlink.version + " (" + nvjitlink.where + ")");
  else r.Problem("nvJitLink not found: " + nvjitlink.error);
  Probe headers = ProbeCudaHeaders(cuda_home);
  if (headers.found) r.Ok("CUDA headers " + headers.version + " (" + headers.where + ")");
  else r.Problem("CUDA headers: " + headers.error + " (set KILN_CUDA_HOME or CUDA_HOME)");
  if (nvrtc.found && headers.found && nvrtc.version != headers.version)
    r.Warn("NVRTC " + nvrtc.version + " and the CUDA headers " + headers.version +
           " differ; NVRTC should compile with the headers of its own toolkit");

  r.Section("devices (where the client launches)");
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) {
    // The daemon compiles without a GPU; only launching needs one.
    r.Warn(driver.status().message());
  } else {
    r.Ok("CUDA driver for CUDA " + client::CudaVersionString((*driver)->version()) + " (" + (*driver)->library_path() +
         ")");
    auto count = client::DeviceCount(**driver);
    if (!count.ok()) r.Problem(count.status().message());
    else if (*count == 0) r.Warn("the driver sees no GPU");
    for (int i = 0; count.ok() && i < *count; ++i) {
      auto d = client::DescribeDevice(**driver, i);
      if (!d.ok()) r.Problem(d.status().message());
      else
        r.Ok("cuda:" + std::to_string(i) + "  " + d->name + "  " + d->arch() + "  " + HumanBytes(d->total_memory) +
             "  " + std::to_string(d->multiprocessors) + " SMs");
    }
  }

  r.Section("workspaces (as seen by uid " + std::to_string(geteuid()) + ")");
  const std::string cache_env = Env("KILN_CACHE_DIR");
  const std::string cache_dir = cache_env.empty() ? proto::DefaultCacheDir() : cache_env;
  CheckWorkspace(r, "cache", cache_dir, cache_env.empty() ? "default" : "KILN_CACHE_DIR");
  const std::string gen_env = Env("KILN_GEN_DIR");
  CheckWorkspace(r, "generated sources", gen_env.empty() ? proto::DefaultGenDir(cache_dir) : gen_env,
                 gen_env.empty() ? "default: <cache>/generated" : "KILN_GEN_DIR");

  r.Section("daemon");
  const client::DaemonConnection& connection = inv.Connection();
  auto mode = client::ParseClientMode(std::getenv("KILN_MODE"));
  // Without a daemon, a process in auto mode compiles itself: only daemon mode (or auto in a
  // kiln built without the embedded engine) needs one.
  const bool daemon_required = mode.ok() && (*mode == ClientMode::kDaemon ||
                                             (*mode == ClientMode::kAuto && !client::EmbeddedEngineBuiltIn()));
  std::string no_daemon;  // why there is none, when the socket shows it
  if (connection.is_local()) {
    struct stat st {};
    const std::string& socket = connection.socket_path();
    if (stat(socket.c_str(), &st) != 0) no_daemon = "socket " + socket + ": does not exist";
    else if (!S_ISSOCK(st.st_mode)) r.Problem("socket " + socket + ": exists but is not a socket");
    else r.Ok("socket " + socket + ": exists");
    std::string found;
    if (no_daemon.empty() && S_ISSOCK(st.st_mode) && !client::DaemonListensAt(socket, &found)) no_daemon = found;
  } else {
    r.Info("target " + connection.target() + " (not a unix socket)");
  }
  if (!no_daemon.empty()) r.Info(no_daemon);
  if (!no_daemon.empty() && !daemon_required) {
    // Nothing to ask: the mode section below checks the embedded engine instead.
  } else {
    auto stub = v1::CacheService::NewStub(connection.channel());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::min<std::chrono::milliseconds>(inv.timeout, std::chrono::seconds(10)));
    v1::CacheStats s;
    grpc::Status status = stub->GetStats(&context, v1::GetStatsRequest(), &s);
    if (!status.ok()) {
      r.Problem(connection.Explain(status, "kilnd").message());
    } else {
      r.Ok("kilnd answers at " + connection.target());
      r.Info("cache " + s.cache_dir() + ": " + std::to_string(s.entries()) + " entries, " + HumanBytes(s.bytes()) +
             (s.max_bytes() ? " of " + HumanBytes(s.max_bytes()) : "") + "; hits " + std::to_string(s.memory_hits()) +
             " memory / " + std::to_string(s.disk_hits()) + " disk, " + std::to_string(s.misses()) + " misses; " +
             std::to_string(s.compiles()) + " compiles (" + std::to_string(s.compile_failures()) + " failed)");
      if (!s.jit_enabled()) r.Warn("JIT is off: only cached or prebuilt kernels are served");
      if (!s.cache_enabled()) r.Warn("the cache is off: every request compiles (diagnostics mode)");
      if (s.quarantined() > 0)
        r.Warn(std::to_string(s.quarantined()) + " damaged blobs quarantined (see kiln cache verify)");
    }
  }

  r.Section("mode of a process here (KILN_MODE)");
  if (!mode.ok()) {
    r.Problem(mode.status().message());
  } else if (*mode == ClientMode::kDaemon) {
    r.Info("daemon: kernels come from kilnd only");
  } else if (*mode == ClientMode::kAuto && no_daemon.empty()) {
    r.Info("auto: kernels come from kilnd while it listens; without it, from the embedded engine");
  } else if (!client::EmbeddedEngineBuiltIn()) {
    r.Problem("embedded engine: this kiln was built without it (KILN_CLIENT_EMBEDDED=OFF); start kilnd");
  } else {
    // Starting it here checks what a process would meet: the settings, the kernels, NVRTC.
    auto summary = client::EmbeddedEngineSummary();
    const std::string which = *mode == ClientMode::kAuto ? "auto, no daemon" : "embedded";
    if (summary.ok()) r.Ok(which + ": kernels compile in each process: " + *summary);
    else r.Problem(which + ": " + summary.status().message());
  }

  inv.out << "\n"
          << (r.problems() == 0 ? "no problems found" : std::to_string(r.problems()) + " problem(s) found")
          << std::endl;
  return r.problems() == 0 ? kExitOk : kExitProblem;
}

}  // namespace

void AddDoctorCommand(std::vector<CommandSpec>& commands) {
  commands.push_back({"doctor",
                      "",
                      "check this node: toolchain, GPUs, workspaces and the daemon",
                      "Exits with 4 when a problem was found. A missing GPU driver is a warning only: kilnd\n"
                      "compiles without one; launching kernels needs one.",
                      {},
                      0,
                      0,
                      RunDoctor});
}

}  // namespace kiln::cli
