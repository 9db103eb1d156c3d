#include "client/core/loader/loader_log.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "proto/origin_word.h"

namespace kiln::client {
namespace {

constexpr const char* kVariable = "KILN_LOADER_LOG";

std::string Ms(double ms) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), ms < 10 ? "%.2f ms" : "%.1f ms", ms);
  return buffer;
}

std::string Bytes(uint64_t bytes) {
  char buffer[32];
  if (bytes < 1024) std::snprintf(buffer, sizeof(buffer), "%llu B", static_cast<unsigned long long>(bytes));
  else if (bytes < (1u << 20)) std::snprintf(buffer, sizeof(buffer), "%.1f KiB", static_cast<double>(bytes) / 1024);
  else std::snprintf(buffer, sizeof(buffer), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buffer;
}

std::string DebugWords(const v1::GetKernelRequest& request) {
  const v1::DebugControls& d = request.debug();
  std::string words;
  for (auto [on, word] : {std::pair{d.lineinfo(), "lineinfo"}, std::pair{d.device_debug(), "device-debug"},
                          std::pair{d.verbose_log(), "verbose-log"}})
    if (on) words += (words.empty() ? "" : ",") + std::string(word);
  return words;
}

}  // namespace

bool ParseLoaderLog(const char* value, std::string* error) {
  error->clear();
  if (value == nullptr || value[0] == '\0' || std::string(value) == "0") return false;
  if (std::string(value) == "1") return true;
  *error = std::string(kVariable) + "='" + value +
           "' is not valid: expected 0 (off, the default) or 1 (one line per module fetch and load on "
           "stderr); the loader log stays off";
  return false;
}

bool LoaderLogEnabled() {
  static const bool enabled = [] {
    std::string error;
    const bool on = ParseLoaderLog(std::getenv(kVariable), &error);
    if (!error.empty()) WriteLoaderLine("kiln: " + error);
    return on;
  }();
  return enabled;
}

void WriteLoaderLine(const std::string& line) {
  const std::string text = line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
}

std::string LoaderLogLine(LoaderEvent event, const v1::GetKernelRequest& request, const FetchedCubin& fetched,
                          double load_ms) {
  const v1::GetKernelResponse& r = fetched.reply;
  std::string line = "[kiln loader] ";
  switch (event) {
    case LoaderEvent::kFetched: line += "fetched "; break;
    case LoaderEvent::kLoaded: line += "loaded "; break;
    case LoaderEvent::kAlreadyLoaded: line += "fetched "; break;
    case LoaderEvent::kLoadFailed: line += "FAILED to load "; break;
  }
  line += r.uri() + " for " + r.arch();
  if (const std::string debug = DebugWords(request); !debug.empty()) line += " (debug compile: " + debug + ")";
  if (event == LoaderEvent::kFetched) line += ", not loaded here";
  if (event == LoaderEvent::kAlreadyLoaded) line += ", in-process cache: this process had loaded that cubin already";
  line += ": origin " + proto::OriginWord(r.origin());
  if (!r.job_id().empty()) line += ", job " + r.job_id();
  line += ", key " + r.cache_key().substr(0, 12);
  // The reply's size: the bytes themselves may have gone to the loaded library already.
  const uint64_t cubin_bytes = r.cubin_size() != 0 ? r.cubin_size() : fetched.cubin.size();
  if (fetched.embedded) {
    line += ", cubin " + Bytes(cubin_bytes) + " from the embedded engine";
    line += ", engine " + Ms(fetched.rpc_ms);
  } else {
    line += ", cubin " + Bytes(cubin_bytes) +
            (fetched.blob_path.empty() ? " in the reply" : " from the blob file " + fetched.blob_path);
    line += ", rpc " + Ms(fetched.rpc_ms) + ", verify " + Ms(fetched.verify_ms);
    if (fetched.local_fetch) line += " (same-node protocol)";
  }
  if (event == LoaderEvent::kLoaded) line += ", load " + Ms(load_ms);
  return line;
}

std::string LoaderLogFailure(double rpc_ms, const Status& status) {
  return "[kiln loader] fetch failed after " + Ms(rpc_ms) + ": " + status.message();
}

void LogFetch(LoaderEvent event, const v1::GetKernelRequest& request, const FetchedCubin& fetched, double load_ms) {
  if (LoaderLogEnabled()) WriteLoaderLine(LoaderLogLine(event, request, fetched, load_ms));
}

void LogFetchFailure(double elapsed_ms, const Status& status) {
  if (LoaderLogEnabled()) WriteLoaderLine(LoaderLogFailure(elapsed_ms, status));
}

}  // namespace kiln::client
