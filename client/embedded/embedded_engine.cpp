// The embedded engine (client/core/rpc/embedded_fetch.h): kilnd's KernelEngine in this process.
// Its settings are kilnd's engine settings read from the environment exactly as kilnd reads
// them (server::ConfigScope::kEngine): the same cache folder by default
// ($XDG_CACHE_HOME/kiln, or /var/cache/kiln for root), the same per-key file locks, so this
// process, other processes and a daemon sharing the folder compile a key once between them.
#include "client/core/rpc/embedded_fetch.h"

#include <dlfcn.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "client/core/rpc/client_counters.h"
#include "client/core/rpc/daemon_connection.h"
#include "client/core/rpc/kernel_rpc.h"
#include "server/config/daemon_config.h"
#include "server/config/engine_options_from_config.h"
#include "server/engine/kernel_engine.h"
#include "server/rpc/kernel_wire.h"

namespace kiln::client {
namespace {

namespace fs = std::filesystem;

// <prefix>/share/kiln/kernels beside an installed <prefix>/lib/libkiln_client.so; empty when
// this library is not installed that way (a build tree: kilnd's own default then finds the
// source tree's kernels).
std::string KernelsBesideLibrary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&KernelsBesideLibrary), &info) == 0 || info.dli_fname == nullptr) return "";
  std::error_code ec;
  fs::path library = fs::canonical(info.dli_fname, ec);
  if (ec) return "";
  fs::path kernels = library.parent_path().parent_path() / "share" / "kiln" / "kernels";
  return fs::is_directory(kernels / "include", ec) ? kernels.string() : "";
}

absl::StatusOr<server::EngineOptions> EmbeddedOptions() {
  std::vector<std::string> args;
  const char* kernels = std::getenv("KILN_KERNELS_DIR");
  if (kernels == nullptr || *kernels == '\0') {
    if (std::string beside = KernelsBesideLibrary(); !beside.empty()) args = {"--kernels-dir", beside};
  }
  auto config = server::LoadDaemonConfig(args, server::ConfigScope::kEngine);
  if (!config.ok()) return config.status();
  return server::EngineOptionsFromConfig(*config);
}

// The engine logs through spdlog's default logger, which writes to stdout at "info": a host
// program's stdout is not ours to write. While the default logger is still spdlog's own (no
// name: nobody in the process configured it), it becomes a stderr logger at KILN_LOG_LEVEL,
// "warn" when unset (a compile is said only when it fails).
void QuietEngineLog() {
  if (!spdlog::default_logger()->name().empty()) return;
  auto logger = spdlog::stderr_color_mt("kiln-embedded");
  const char* level = std::getenv("KILN_LOG_LEVEL");
  logger->set_level(level != nullptr && *level != '\0' ? spdlog::level::from_str(level) : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

struct Embedded {
  std::unique_ptr<server::KernelEngine> engine;  // null when it could not start
  Status error;                                  // why not
  std::string summary;
};

// Started at the first use and kept until the process exits (never destroyed: compiles may
// still run on its threads while static destructors run).
const Embedded& Instance() {
  static Embedded* instance = [] {
    auto* e = new Embedded();
    auto options = EmbeddedOptions();
    if (!options.ok()) {
      e->error = Status(StatusCode::kFailedPrecondition,
                        "the embedded engine cannot start: " + std::string(options.status().message()));
      return e;
    }
    QuietEngineLog();
    auto engine = server::KernelEngine::Create(*options);
    if (!engine.ok()) {
      e->error = Status(StatusCode::kFailedPrecondition,
                        "the embedded engine cannot start: " + std::string(engine.status().message()));
      return e;
    }
    e->engine = std::move(engine).value();
    e->summary = "cache " + options->cache_dir + ", kernels " + options->kernels_dir;
    return e;
  }();
  return *instance;
}

}  // namespace

bool EmbeddedEngineBuiltIn() { return true; }

StatusOr<FetchedCubin> EmbeddedFetch(const v1::GetKernelRequest& request, const FetchOptions& options) {
  const std::string what = "GetKernel " + DescribeRequest(request);
  const Embedded& embedded = Instance();
  if (embedded.engine == nullptr) return embedded.error.WithContext(what);
  auto query = server::QueryFromRequest(request, "embedded in " + options.client_id);
  if (!query.ok())
    return Status(CodeForCanonical(int(query.status().code())), what + ": " + std::string(query.status().message()));

  const auto start = std::chrono::steady_clock::now();
  auto served = embedded.engine->GetKernel(*query, start + options.timeout, [] { return false; });
  if (!served.ok())
    return Status(CodeForCanonical(int(served.status().code())), what + ": " + std::string(served.status().message()));

  FetchedCubin fetched;
  server::FillKernelReply(*served, &fetched.reply);
  fetched.cubin = *served->artifact->cubin;
  fetched.rpc_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  fetched.embedded = true;
  Bump(Counters().embedded_fetches);
  return fetched;
}

StatusOr<std::string> EmbeddedNvrtcVersion() {
  const Embedded& embedded = Instance();
  if (embedded.engine == nullptr) return embedded.error;
  return embedded.engine->toolchain().nvrtc;
}

StatusOr<std::string> EmbeddedEngineSummary() {
  const Embedded& embedded = Instance();
  if (embedded.engine == nullptr) return embedded.error;
  return embedded.summary;
}

}  // namespace kiln::client
