// How a C ABI function reports: kiln_status out, the message in a thread-local string
// (kiln_last_error), and no exception ever crosses the boundary.
#pragma once

#include <exception>
#include <string>

#include "kiln/c_abi.h"
#include "kiln/status.h"

namespace kiln::client {

// Records `status` (clears the message on success) and returns its code.
kiln_status FinishC(const Status& status);
// For an exception caught at the boundary: KILN_ERROR_INTERNAL naming the API.
kiln_status CrashedC(const char* api, const char* what);

// Runs `body` (returning a kiln::Status) and converts its result or exception.
template <typename Body>
kiln_status GuardC(const char* api, Body body) {
  try {
    return FinishC(body());
  } catch (const std::exception& e) {
    return CrashedC(api, e.what());
  } catch (...) {
    return CrashedC(api, "unknown exception");
  }
}

const char* LastErrorC();

}  // namespace kiln::client
