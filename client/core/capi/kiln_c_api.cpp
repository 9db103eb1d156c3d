// The C ABI (kiln/c_abi.h) of the client itself: errors, version, the daemon socket. The ops
// define their C functions with their C++ API (client/ops/); none lets an exception cross.
#include "kiln/c_abi.h"

#include <chrono>
#include <sstream>
#include <string>

#include "client/core/capi/c_status.h"
#include "client/core/rpc/kernel_source.h"
#include "kiln/client.h"
#include "kiln/kernel.h"

using kiln::client::GuardC;

extern "C" {

const char* kiln_last_error(void) { return kiln::client::LastErrorC(); }

const char* kiln_status_name(kiln_status status) {
  if (status < KILN_OK || status > KILN_ERROR_UNKNOWN) return "UNKNOWN_STATUS";
  return kiln::StatusCodeName(static_cast<kiln::StatusCode>(status));
}

const char* kiln_version(void) { return kiln::Version(); }

kiln_status kiln_set_socket(const char* socket) {
  return GuardC("kiln_set_socket", [&] {
    kiln::ClientOptions options = kiln::CurrentOptions();
    options.socket = socket != nullptr ? socket : "";
    return kiln::Configure(options);
  });
}

kiln_status kiln_connect(const char* socket, int timeout_ms) {
  return GuardC("kiln_connect", [&] {
    kiln::ClientOptions options = kiln::CurrentOptions();
    options.socket = socket != nullptr ? socket : "";
    KILN_RETURN_IF_ERROR(kiln::Configure(options));
    return kiln::Ping(std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 5000));
  });
}

kiln_status kiln_set_mode(const char* mode) {
  return GuardC("kiln_set_mode", [&]() -> kiln::Status {
    kiln::ClientOptions options = kiln::CurrentOptions();
    if (mode == nullptr || *mode == '\0') {
      options.mode = kiln::ClientMode::kFromEnvironment;
    } else {
      KILN_ASSIGN_OR_RETURN(options.mode, kiln::client::ParseClientMode(mode, "kiln_set_mode mode"));
    }
    return kiln::Configure(options);
  });
}

const char* kiln_describe_mode(void) {
  thread_local std::string described;
  try {
    described = kiln::DescribeMode();
  } catch (...) {  // no exception crosses the C ABI (only std::bad_alloc could come here)
    described = "unknown: kiln_describe_mode failed";
  }
  return described.c_str();
}

kiln_status kiln_prefetch(const char* op, const char* params, const char* arch, const char** summary) {
  thread_local std::string described;
  if (summary != nullptr) *summary = nullptr;
  return GuardC("kiln_prefetch", [&]() -> kiln::Status {
    if (op == nullptr || *op == '\0') return kiln::Status(kiln::StatusCode::kInvalidArgument, "op is NULL or empty");
    if (arch == nullptr || *arch == '\0')
      return kiln::Status(kiln::StatusCode::kInvalidArgument, "arch is NULL or empty (give one, e.g. \"sm_90a\")");
    kiln::OpRequest request{op, {}};
    std::istringstream words(params != nullptr ? params : "");
    for (std::string word; words >> word;) {
      const size_t eq = word.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == word.size())
        return kiln::Status(kiln::StatusCode::kInvalidArgument,
                            "params: \"" + word + "\" is not KEY=VALUE (words are separated by spaces)");
      if (!request.params.emplace(word.substr(0, eq), word.substr(eq + 1)).second)
        return kiln::Status(kiln::StatusCode::kInvalidArgument, "params: " + word.substr(0, eq) + " is given twice");
    }
    KILN_ASSIGN_OR_RETURN(kiln::ModuleInfo info, kiln::Prefetch(request, arch));
    described = "uri=" + info.uri + " arch=" + info.arch + " origin=" + kiln::OriginName(info.origin) +
                " key=" + info.cache_key + " sha256=" + info.sha256 + " bytes=" + std::to_string(info.cubin_size);
    if (summary != nullptr) *summary = described.c_str();
    return kiln::Status();
  });
}

}  // extern "C"
