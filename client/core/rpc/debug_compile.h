// KILN_DEBUG_COMPILE: the process-wide diagnostic compile control of the client library.
// "lineinfo", "device-debug" and "verbose-log" (a comma list) make every kernel request of this
// process ask kilnd for that debug compile (GetKernelRequest.debug; each a separate cache
// entry). Never on by default; when on, stderr says so once, loudly. docs/diagnostic-controls.md.
#pragma once

#include <string>
#include <vector>

#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

struct DebugCompile {
  bool lineinfo = false;      // -lineinfo
  bool device_debug = false;  // -G
  bool verbose_log = false;   // keep ptxas' verbose report with the entry

  bool any() const { return lineinfo || device_debug || verbose_log; }
  // "lineinfo,device-debug" in the variable's own words; "" for the default.
  std::string Describe() const;
  // Sets the request's debug controls this asks for (leaves the others as they are).
  void ApplyTo(v1::GetKernelRequest* request) const;
};

// Parses a value of KILN_DEBUG_COMPILE. Unset, empty, "0" and "none" are the default. A word
// that is none of the accepted ones makes the whole value invalid: the result is the default
// and `*error` says what was wrong and what is accepted (nothing half-applied from a typo).
DebugCompile ParseDebugCompile(const char* value, std::string* error);

// The process's control, from the environment on first use. That first use writes to stderr
// one line when the value is invalid (naming the variable and the accepted values), or one
// loud line saying which debug compile every kernel of this process gets.
const DebugCompile& ProcessDebugCompile();

// The stderr line of an active control (exposed for tests).
std::string DebugCompileNotice(const DebugCompile& debug);

}  // namespace kiln::client
