#include "server/jit/pch_key.h"

#include <algorithm>
#include <vector>

#include "kernels/jit/digest.h"

namespace kiln::server {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// Whether the prefix has an #include whose operand is not a literal "x" or <x>.
bool HasComputedInclude(std::string_view prefix) {
  for (size_t at = prefix.find("include"); at != std::string_view::npos; at = prefix.find("include", at + 1)) {
    size_t hash = at;
    while (hash > 0 && IsBlank(prefix[hash - 1])) --hash;
    if (hash == 0 || prefix[hash - 1] != '#') continue;
    size_t operand = at + 7;
    if (operand < prefix.size() && prefix[operand] == '_') continue;  // #include_next: literal or not, see below
    while (operand < prefix.size() && IsBlank(prefix[operand])) ++operand;
    if (operand >= prefix.size() || (prefix[operand] != '"' && prefix[operand] != '<')) return true;
  }
  return prefix.find("include_next") != std::string_view::npos;
}

// `text` without its // and /* */ comments (a header named only in a comment is not
// included). String literals are kept as they are.
std::string WithoutComments(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '"') {
      size_t end = text.find_first_of("\"\n", i + 1);
      end = end == std::string_view::npos ? text.size() : end + 1;
      out.append(text.substr(i, end - i));
      i = end - 1;
    } else if (text.compare(i, 2, "//") == 0) {
      i = std::min(text.find('\n', i), text.size()) - 1;
    } else if (text.compare(i, 2, "/*") == 0) {
      size_t end = text.find("*/", i + 2);
      i = end == std::string_view::npos ? text.size() : end + 1;
      out.push_back(' ');
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

std::string_view DirectivePrefix(std::string_view unit) {
  size_t at = 0;
  bool in_comment = false;
  while (at < unit.size()) {
    size_t line_end = at;
    // A logical line: physical lines joined by a trailing backslash.
    while (true) {
      line_end = unit.find('\n', line_end);
      if (line_end == std::string_view::npos) {
        line_end = unit.size();
        break;
      }
      size_t last = line_end;
      while (last > at && unit[last - 1] == '\r') --last;
      if (last > at && unit[last - 1] == '\\') {
        ++line_end;
        continue;
      }
      break;
    }
    std::string_view line = unit.substr(at, line_end - at);
    // What the line holds outside comments, up to its first non-blank character.
    bool directive = false, other = false;
    for (size_t i = 0; i < line.size() && !directive && !other; ++i) {
      if (in_comment) {
        if (line.compare(i, 2, "*/") == 0) {
          in_comment = false;
          ++i;
        }
        continue;
      }
      if (IsBlank(line[i]) || line[i] == '\\' || line[i] == '\n') continue;
      if (line.compare(i, 2, "//") == 0) break;
      if (line.compare(i, 2, "/*") == 0) {
        in_comment = true;
        ++i;
        continue;
      }
      if (line[i] == '#') directive = true;
      else other = true;
    }
    if (other) return unit.substr(0, at);
    if (directive) {
      // A block comment opened on a directive line would swallow what follows; track it.
      size_t open = line.rfind("/*"), close = line.rfind("*/");
      if (open != std::string_view::npos && (close == std::string_view::npos || close < open)) in_comment = true;
    }
    at = line_end < unit.size() ? line_end + 1 : unit.size();
  }
  return unit;
}

std::string PchKey(const kernels::SourceFile& unit, const kernels::JitSpec& spec, const kernels::TreeSnapshot* tree) {
  const std::string_view prefix = DirectivePrefix(unit.content);
  const std::string directives = WithoutComments(prefix);
  const bool all_headers = HasComputedInclude(directives);
  std::vector<bool> keyed(spec.headers.size(), false);
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < spec.headers.size(); ++i) {
      if (keyed[i]) continue;
      const std::string& name = spec.headers[i].name;
      bool reachable = all_headers || directives.find(name) != std::string::npos;
      if (!reachable && tree != nullptr) {
        for (const auto& [path, content] : tree->files) {
          if (path.starts_with("include/") && content.find(name) != std::string::npos) {
            reachable = true;
            break;
          }
        }
      }
      for (size_t j = 0; j < spec.headers.size() && !reachable; ++j) {
        reachable = keyed[j] && spec.headers[j].content.find(name) != std::string::npos;
      }
      if (reachable) keyed[i] = grew = true;
    }
  }
  kernels::Sha256Digest digest;
  digest.UpdateField("kiln.pch.v1").UpdateField(unit.name).UpdateField(prefix);
  digest.UpdateField(tree != nullptr ? tree->digest : "");
  for (size_t i = 0; i < spec.headers.size(); ++i) {
    if (keyed[i]) digest.UpdateField(spec.headers[i].name).UpdateField(spec.headers[i].content);
  }
  return digest.FinalHex().substr(0, 16);
}

}  // namespace kiln::server
