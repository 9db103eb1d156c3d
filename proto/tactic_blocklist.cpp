#include "proto/tactic_blocklist.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "proto/tuning_checks.h"

namespace kiln::proto {
namespace {

constexpr const char* kForm =
    "<op> <tactic> [gpu=<part of the GPU name>] [driver=<driver version, e.g. 13000>] [nvrtc=<version, e.g. 13.0>]";
constexpr const char* kMatchKeys[] = {"gpu=", "driver=", "nvrtc="};

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The next whitespace-separated word of `*rest`, consumed.
std::string_view NextWord(std::string_view* rest) {
  *rest = Trim(*rest);
  const size_t end = rest->find_first_of(" \t");
  std::string_view word = rest->substr(0, end);
  *rest = end == std::string_view::npos ? std::string_view() : rest->substr(end);
  return word;
}

// Where the next match ("gpu=", ...) starts in `text` at a word boundary, or npos.
size_t NextMatch(std::string_view text, size_t from) {
  size_t best = std::string_view::npos;
  for (const char* key : kMatchKeys) {
    for (size_t at = text.find(key, from); at != std::string_view::npos; at = text.find(key, at + 1)) {
      if (at == 0 || text[at - 1] == ' ' || text[at - 1] == '\t') {
        best = std::min(best, at);
        break;
      }
    }
  }
  return best;
}

// Reads the matches after the tactic into `entry`; "" or what is wrong.
std::string ReadMatches(std::string_view rest, v1::BlockedTactic* entry) {
  rest = Trim(rest);
  if (rest.empty()) return "";
  if (NextMatch(rest, 0) != 0)
    return "'" + std::string(rest) + "' after the tactic: expected gpu=, driver= or nvrtc= matches";
  while (!rest.empty()) {
    const size_t next = NextMatch(rest, 1);
    const std::string_view match = Trim(rest.substr(0, next));
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next);
    const size_t eq = match.find('=');
    const std::string_view key = match.substr(0, eq);
    const std::string_view value = Trim(match.substr(eq + 1));
    if (value.empty()) return std::string(key) + "= has no value";
    if (key == "gpu") {
      if (!entry->gpu().empty()) return "gpu= is given twice";
      entry->set_gpu(std::string(value));
    } else if (key == "driver") {
      int v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || end != value.data() + value.size() || v <= 0)
        return "driver=" + std::string(value) +
               ": expected the driver's version as cuDriverGetVersion gives it, e.g. 13000";
      if (entry->driver_version() != 0) return "driver= is given twice";
      entry->set_driver_version(v);
    } else {
      if (value.find_first_of(" \t") != std::string_view::npos)
        return "nvrtc=" + std::string(value) + ": expected one version, e.g. 13.0";
      if (!entry->nvrtc_version().empty()) return "nvrtc= is given twice";
      entry->set_nvrtc_version(std::string(value));
    }
  }
  return "";
}

}  // namespace

ParsedBlocklist ParseTacticBlocklist(std::string_view text, std::string_view label, std::string_view path,
                                     const TacticCheck& check) {
  ParsedBlocklist out;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const std::string_view content = Trim(std::string_view(line).substr(0, line.find('#')));
    if (content.empty()) continue;
    const std::string where = std::string(path) + ":" + std::to_string(number);
    std::string_view rest = content;
    const std::string_view op = NextWord(&rest);
    const std::string_view tactic = NextWord(&rest);
    v1::BlockedTactic entry;
    entry.set_op(std::string(op));
    entry.set_tactic(std::string(tactic));
    entry.set_source(where);
    std::string problem = OpNameProblem("the op", op);
    if (problem.empty()) problem = TacticTextProblem("the tactic", tactic);
    if (problem.empty() && check) problem = check(op, tactic);
    if (problem.empty()) problem = ReadMatches(rest, &entry);
    if (!problem.empty()) {
      out.entries.clear();
      out.error = std::string(label) + " " + where + ": '" + std::string(content) + "': " + problem + "; expected '" +
                  kForm + "'";
      return out;
    }
    out.entries.push_back(std::move(entry));
  }
  return out;
}

ParsedBlocklist ReadTacticBlocklist(std::string_view label, const std::string& path, const TacticCheck& check) {
  std::ifstream file(path);
  if (!file) {
    ParsedBlocklist out;
    out.error = std::string(label) + " " + path + ": cannot read the file (" + std::strerror(errno) + ")";
    return out;
  }
  std::ostringstream all;
  all << file.rdbuf();
  return ParseTacticBlocklist(all.str(), label, path, check);
}

bool BlockedTacticApplies(const v1::BlockedTactic& entry, const v1::TuningEnvironment& here) {
  if (!entry.gpu().empty() && here.gpu_name().find(entry.gpu()) == std::string::npos) return false;
  if (entry.driver_version() != 0 && entry.driver_version() != here.driver_version()) return false;
  if (!entry.nvrtc_version().empty() && entry.nvrtc_version() != here.nvrtc_version()) return false;
  return true;
}

bool IsTacticBlocked(const std::vector<v1::BlockedTactic>& entries, std::string_view op, std::string_view tactic,
                     const v1::TuningEnvironment& here) {
  for (const v1::BlockedTactic& e : entries)
    if (e.op() == op && e.tactic() == tactic && BlockedTacticApplies(e, here)) return true;
  return false;
}

}  // namespace kiln::proto
