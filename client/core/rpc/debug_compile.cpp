#include "client/core/rpc/debug_compile.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace kiln::client {
namespace {

constexpr const char* kVariable = "KILN_DEBUG_COMPILE";
constexpr const char* kAccepted =
    "a comma list of lineinfo, device-debug, verbose-log (or empty / none / 0 for the default)";

std::string Trimmed(const std::string& text) {
  size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  size_t last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

void WriteLine(const std::string& line) {
  const std::string text = line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);  // one write: lines of threads don't mix
}

}  // namespace

std::string DebugCompile::Describe() const {
  std::string words;
  for (auto [on, word] : {std::pair{lineinfo, "lineinfo"}, std::pair{device_debug, "device-debug"},
                          std::pair{verbose_log, "verbose-log"}})
    if (on) words += (words.empty() ? "" : ",") + std::string(word);
  return words;
}

void DebugCompile::ApplyTo(v1::GetKernelRequest* request) const {
  if (!any()) return;
  v1::DebugControls* debug = request->mutable_debug();
  if (lineinfo) debug->set_lineinfo(true);
  if (device_debug) debug->set_device_debug(true);
  if (verbose_log) debug->set_verbose_log(true);
}

DebugCompile ParseDebugCompile(const char* value, std::string* error) {
  DebugCompile debug;
  error->clear();
  if (value == nullptr) return debug;
  const std::string text = Trimmed(value);
  if (text.empty() || text == "0" || text == "none") return debug;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string word = Trimmed(text.substr(start, comma - start));
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (word == "lineinfo") {
      debug.lineinfo = true;
    } else if (word == "device-debug") {
      debug.device_debug = true;
    } else if (word == "verbose-log") {
      debug.verbose_log = true;
    } else {
      *error = std::string(kVariable) + "='" + value +
               "' is not valid: " + (word.empty() ? std::string("an empty item") : "'" + word + "' is not a control") +
               "; expected " + kAccepted +
               ". Ignoring it: kernels are compiled the default way (optimized, no line info)";
      return DebugCompile();
    }
    start = comma + 1;
  }
  return debug;
}

std::string DebugCompileNotice(const DebugCompile& debug) {
  std::string what;
  auto add = [&what](const char* text) { what += (what.empty() ? "" : "; ") + std::string(text); };
  if (debug.lineinfo) add("-lineinfo (default: no line info)");
  if (debug.device_debug) add("-G, unoptimized device code for cuda-gdb, much slower (default: optimized)");
  if (debug.verbose_log)
    add("ptxas' verbose report kept in the compile log (default: left out; the attributes are in the reply)");
  return "kiln: " + std::string(kVariable) + "=" + debug.Describe() +
         ": every kernel this process asks kilnd for is a DEBUG COMPILE: " + what +
         ". Each is a separate cache entry; a diagnostic control, see docs/diagnostic-controls.md";
}

const DebugCompile& ProcessDebugCompile() {
  static const DebugCompile debug = [] {
    std::string error;
    DebugCompile parsed = ParseDebugCompile(std::getenv(kVariable), &error);
    if (!error.empty()) WriteLine("kiln: " + error);
    if (parsed.any()) WriteLine(DebugCompileNotice(parsed));
    return parsed;
  }();
  return debug;
}

}  // namespace kiln::client
