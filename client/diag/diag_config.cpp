#include "client/diag/diag_config.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kiln::client::diag {
namespace detail {
std::atomic<int> g_level{-1};
}

namespace {

// "abc" → 'abc' for messages (the value as the user typed it, quoted).
std::string Quoted(const char* value) { return std::string("'") + value + "'"; }

bool ParseInt(const std::string& text, int64_t* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return false;
  *value = v;
  return true;
}

std::vector<std::string> SplitPatterns(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    const size_t first = item.find_first_not_of(" \t");
    const size_t last = item.find_last_not_of(" \t");
    if (first != std::string::npos) out.push_back(item.substr(first, last - first + 1));
    start = comma + 1;
  }
  return out;
}

}  // namespace

bool ParseByteCount(const std::string& text, int64_t* bytes) {
  if (text.empty()) return false;
  std::string digits = text;
  int shift = 0;
  const char suffix = text.back();
  if (suffix == 'K' || suffix == 'k') shift = 10;
  if (suffix == 'M' || suffix == 'm') shift = 20;
  if (suffix == 'G' || suffix == 'g') shift = 30;
  if (shift != 0) digits.pop_back();
  int64_t value = 0;
  if (!ParseInt(digits, &value) || value < 0) return false;
  if (value > (INT64_MAX >> shift)) return false;
  *bytes = value << shift;
  return true;
}

DiagConfig ParseDiagConfig(const EnvLookup& env, std::vector<std::string>* warnings) {
  DiagConfig c;
  auto warn = [&](const char* name, const char* value, const std::string& accepted, const std::string& fallback) {
    warnings->push_back(std::string(name) + "=" + Quoted(value) + " is not valid: " + accepted + "; using " + fallback);
  };
  auto get = [&](const char* name) -> const char* {
    const char* v = env(name);
    return v != nullptr && *v != '\0' ? v : nullptr;  // set but empty: as unset
  };

  if (const char* v = get("KILN_LOGLEVEL")) {
    int64_t level = 0;
    if (ParseInt(v, &level) && level >= 0 && level <= kMaxLevel) c.level = static_cast<int>(level);
    else
      warn("KILN_LOGLEVEL", v, "expected an integer 0..10 (0 off, 1 op names, 3 arguments, 5 statistics, 10 dumps)",
           "0 (call logging off)");
  }
  if (const char* v = get("KILN_LOGDEST")) c.dest = v;  // any path is a path; opening it is checked later
  if (const char* v = get("KILN_DUMP_DIR")) c.dump_dir = v;
  if (const char* v = get("KILN_DUMP_MAX_COUNT")) {
    int64_t count = 0;
    if (ParseInt(v, &count) && count >= 0) c.dump_max_count = count;
    else warn("KILN_DUMP_MAX_COUNT", v, "expected a number of calls >= 0", std::to_string(kDefaultDumpMaxCount));
  }
  if (const char* v = get("KILN_DUMP_MAX_BYTES")) {
    int64_t bytes = 0;
    if (ParseByteCount(v, &bytes)) c.dump_max_bytes = bytes;
    else
      warn("KILN_DUMP_MAX_BYTES", v, "expected a number of bytes >= 0, optionally with K, M or G (x1024)",
           std::to_string(kDefaultDumpMaxBytes) + " (20G)");
  }
  if (const char* v = get("KILN_DUMP_INCLUDE")) c.include = SplitPatterns(v);
  if (const char* v = get("KILN_DUMP_EXCLUDE")) c.exclude = SplitPatterns(v);
  if (const char* v = get("KILN_DUMP_TEST_PAUSE_MS")) {
    int64_t ms = 0;
    if (ParseInt(v, &ms) && ms >= 0 && ms <= 3600 * 1000) c.test_pause_ms = ms;
    else warn("KILN_DUMP_TEST_PAUSE_MS", v, "expected milliseconds 0..3600000 (a test hook)", "0");
  }
  return c;
}

const DiagConfig& Config() {
  static const DiagConfig config = [] {
    std::vector<std::string> warnings;
    DiagConfig c = ParseDiagConfig([](const char* name) { return std::getenv(name); }, &warnings);
    for (const auto& w : warnings) {
      const std::string line = "[kiln] " + w + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
    }
    // The level becomes visible only now: a concurrent first call waits in this initializer.
    int expected = -1;
    detail::g_level.compare_exchange_strong(expected, c.level);
    return c;
  }();
  return config;
}

}  // namespace kiln::client::diag
