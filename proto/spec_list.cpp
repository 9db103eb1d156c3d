#include "proto/spec_list.h"

#include <errno.h>
#include <string.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iostream>
#include <sstream>

namespace kiln::proto {
namespace {

constexpr std::string_view kForm = "expected 'OP KEY=VALUE... [@ARCH...]'";

bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool IsName(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsNameChar); }

// A param value: printable, no spaces, no '#', no '@' at the start (an arch token).
bool IsValue(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 127 && c != '#'; });
}

// "sm_" and digits, with an optional a/f suffix: the form of a compute capability the daemon
// parses further.
bool IsArch(std::string_view s) {
  if (s.size() < 5 || s.substr(0, 3) != "sm_") return false;
  std::string_view rest = s.substr(3);
  if (rest.back() == 'a' || rest.back() == 'f') rest.remove_suffix(1);
  return !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string_view> Tokens(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

}  // namespace

ParsedSpecList ParseSpecList(std::string_view text, std::string_view path) {
  ParsedSpecList out;
  std::map<std::pair<std::string, std::map<std::string, std::string>>, size_t> seen;
  int number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view raw = text.substr(start, end - start);
    start = end + 1;
    ++number;
    std::string_view line = raw;
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto tokens = Tokens(line);
    if (tokens.empty()) {
      if (end == text.size()) break;
      continue;
    }
    const std::string where = std::string(path) + ":" + std::to_string(number);
    auto fail = [&](const std::string& what) {
      out.entries.clear();
      out.error = where + ": '" + std::string(raw) + "': " + what + "; " + std::string(kForm);
      return out;
    };
    SpecListEntry entry;
    entry.source = where;
    if (!IsName(tokens[0])) return fail("the op '" + std::string(tokens[0]) + "' is not a name ([A-Za-z0-9_])");
    entry.op = std::string(tokens[0]);
    for (size_t i = 1; i < tokens.size(); ++i) {
      const std::string_view t = tokens[i];
      if (t[0] == '@') {
        if (!IsArch(t.substr(1))) return fail("'" + std::string(t) + "' is not an arch target like @sm_90a or @sm_80");
        if (std::find(entry.archs.begin(), entry.archs.end(), t.substr(1)) == entry.archs.end())
          entry.archs.emplace_back(t.substr(1));
        continue;
      }
      if (!entry.archs.empty()) return fail("the param '" + std::string(t) + "' comes after an @ARCH target");
      const size_t eq = t.find('=');
      if (eq == std::string_view::npos) return fail("'" + std::string(t) + "' is not KEY=VALUE");
      const std::string key(t.substr(0, eq));
      const std::string value(t.substr(eq + 1));
      if (!IsName(key)) return fail("the param name '" + key + "' is not a name ([A-Za-z0-9_])");
      if (!IsValue(value)) return fail("the param " + key + " has no value");
      if (!entry.params.emplace(key, value).second) return fail("the param " + key + " is given twice");
    }
    auto [it, fresh] = seen.emplace(std::make_pair(entry.op, entry.params), out.entries.size());
    if (fresh) {
      out.entries.push_back(std::move(entry));
    } else {
      auto& archs = out.entries[it->second].archs;
      for (auto& a : entry.archs)
        if (std::find(archs.begin(), archs.end(), a) == archs.end()) archs.push_back(a);
    }
    if (end == text.size()) break;
  }
  return out;
}

ParsedSpecList ReadSpecList(const std::string& path) {
  std::ostringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    return ParseSpecList(text.str(), "<stdin>");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ParsedSpecList out;
    out.error = "cannot read the spec list " + path + ": " + strerror(errno);
    return out;
  }
  text << in.rdbuf();
  return ParseSpecList(text.str(), path);
}

std::string FormatSpecLine(const SpecListEntry& entry, std::string_view comment) {
  std::string line = entry.op;
  for (const auto& [k, v] : entry.params) line += " " + k + "=" + v;
  for (const auto& a : entry.archs) line += " @" + a;
  if (!comment.empty()) line += "  # " + std::string(comment);
  return line;
}

v1::OpRequest SpecTarget::Request() const {
  v1::OpRequest op;
  op.set_name(entry->op);
  for (const auto& [k, v] : entry->params) (*op.mutable_params())[k] = v;
  return op;
}

SpecTargets ExpandSpecTargets(const std::vector<SpecListEntry>& entries, const std::vector<std::string>& archs,
                              std::string_view arch_flag) {
  SpecTargets out;
  for (const auto& entry : entries) {
    const auto& use = archs.empty() ? entry.archs : archs;
    if (use.empty()) {
      out.targets.clear();
      out.error = entry.source + ": " + entry.op + " names no @ARCH target and no " + std::string(arch_flag) +
                  " was given; add @sm_90a (say) to the line or pass " + std::string(arch_flag);
      return out;
    }
    for (const auto& arch : use) out.targets.push_back(SpecTarget{&entry, arch});
  }
  return out;
}

}  // namespace kiln::proto
