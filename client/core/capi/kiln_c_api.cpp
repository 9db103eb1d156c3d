// The C ABI (kiln/c_abi.h) of the client itself: errors, version, the daemon socket. The ops
// define their C functions with their C++ API (client/ops/); none lets an exception cross.
#include "kiln/c_abi.h"

#include <chrono>
#include <string>

#include "client/core/capi/c_status.h"
#include "client/core/rpc/kernel_source.h"
#include "kiln/client.h"
#include "kiln/kernel.h"
#include "proto/spec_list.h"

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
    // The words are a spec line's (proto/spec_list.h, the one parser of `OP KEY=VALUE...`); its
    // comment and @ARCH forms have no place here.
    const std::string words = params != nullptr ? params : "";
    if (words.find_first_of("#@\n") != std::string::npos)
      return kiln::Status(kiln::StatusCode::kInvalidArgument,
                          "params: '#', '@' and line breaks are not allowed (give the arch as the arch argument)");
    const kiln::proto::ParsedSpecList parsed = kiln::proto::ParseSpecList(std::string(op) + " " + words, "params");
    if (!parsed.error.empty()) return kiln::Status(kiln::StatusCode::kInvalidArgument, parsed.error);
    const kiln::OpRequest request{parsed.entries[0].op, parsed.entries[0].params};
    KILN_ASSIGN_OR_RETURN(kiln::ModuleInfo info, kiln::Prefetch(request, arch));
    described = "uri=" + info.uri + " arch=" + info.arch + " origin=" + kiln::OriginName(info.origin) +
                " key=" + info.cache_key + " sha256=" + info.sha256 + " bytes=" + std::to_string(info.cubin_size);
    if (summary != nullptr) *summary = described.c_str();
    return kiln::Status();
  });
}

}  // extern "C"
