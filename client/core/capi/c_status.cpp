#include "client/core/capi/c_status.h"

namespace kiln::client {
namespace {
thread_local std::string last_error;
}  // namespace

kiln_status FinishC(const Status& status) {
  if (status.ok()) {
    last_error.clear();
    return KILN_OK;
  }
  last_error = status.message();
  return static_cast<kiln_status>(status.code());
}

kiln_status CrashedC(const char* api, const char* what) {
  last_error = std::string(api) + ": internal error: " + what;
  return KILN_ERROR_INTERNAL;
}

const char* LastErrorC() { return last_error.c_str(); }

}  // namespace kiln::client
