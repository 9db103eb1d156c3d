#include "kernels/jit/include_scan.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kernels/jit/raw_source_checks.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kAllowedIncludes =
    "a literal \"path\" or <path> naming a file of the kernels include folder "
    "(e.g. \"kiln/common/vec.cuh\") or of the CUDA include folder (e.g. <cuda_fp16.h>), "
    "relative, without '..'";

// Debian's abseil has its own absl::string_view, which its split/strip helpers take and
// std::string_view does not convert to; these few work on std::string_view.
bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n'; }

std::string_view StripLeading(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view Strip(std::string_view s) {
  s = StripLeading(s);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Split(std::string_view s, std::string_view delimiters, bool skip_empty) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    size_t end = s.find_first_of(delimiters, start);
    std::string_view part = s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!part.empty() || !skip_empty) parts.push_back(part);
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// The code as the preprocessor's directive parser sees it: line splices joined, comments
// blanked (their newlines kept, so a directive hidden after a multi-line comment is still
// scanned: stricter than C, never looser), raw-string contents blanked. `literal` marks
// bytes inside ordinary string or character literals; `line` maps each byte to its line.
struct CleanCode {
  std::string text;
  std::vector<bool> literal;
  std::vector<int> line;
};

CleanCode Clean(std::string_view code) {
  std::string spliced;
  std::vector<int> lines;
  spliced.reserve(code.size());
  lines.reserve(code.size());
  int line = 1;
  for (size_t i = 0; i < code.size(); ++i) {
    if (code[i] == '\\' && i + 1 < code.size() &&
        (code[i + 1] == '\n' || (code[i + 1] == '\r' && i + 2 < code.size() && code[i + 2] == '\n'))) {
      i += code[i + 1] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    spliced.push_back(code[i]);
    lines.push_back(line);
    if (code[i] == '\n') ++line;
  }

  CleanCode out;
  out.text.reserve(spliced.size());
  out.literal.reserve(spliced.size());
  out.line = lines;
  enum class State { kCode, kLineComment, kBlockComment, kString, kChar, kRawString } state = State::kCode;
  std::string raw_end;  // )delim"
  for (size_t i = 0; i < spliced.size(); ++i) {
    char c = spliced[i];
    char next = i + 1 < spliced.size() ? spliced[i + 1] : '\0';
    char emit = c;
    bool literal = false;
    switch (state) {
      case State::kCode:
        if (c == '/' && next == '/') {
          state = State::kLineComment;
          emit = ' ';
        } else if (c == '/' && next == '*') {
          state = State::kBlockComment;
          out.text.append("  ");
          out.literal.insert(out.literal.end(), 2, false);
          ++i;
          continue;
        } else if (c == '"') {
          // R"delim( ... )delim", also with an encoding prefix (u8R, uR, UR, LR).
          size_t r = i;
          if (r > 0 && spliced[r - 1] == 'R') {
            size_t start = r - 1;
            while (start > 0 && IsIdentifierChar(spliced[start - 1])) --start;
            std::string_view prefix(spliced.data() + start, r - start);
            if (prefix == "R" || prefix == "u8R" || prefix == "uR" || prefix == "UR" || prefix == "LR") {
              size_t paren = spliced.find('(', i + 1);
              if (paren != std::string::npos && paren - i - 1 <= 16) {
                raw_end = ")" + spliced.substr(i + 1, paren - i - 1) + "\"";
                state = State::kRawString;
                break;
              }
            }
          }
          state = State::kString;
        } else if (c == '\'' && !(i > 0 && absl::ascii_isxdigit(spliced[i - 1]) && IsIdentifierChar(next))) {
          state = State::kChar;  // (not a digit separator as in 1'000)
        }
        break;
      case State::kLineComment:
        if (c == '\n') state = State::kCode;
        else emit = ' ';
        break;
      case State::kBlockComment:
        if (c == '*' && next == '/') {
          state = State::kCode;
          out.text.append("  ");
          out.literal.insert(out.literal.end(), 2, false);
          ++i;
          continue;
        }
        if (c != '\n') emit = ' ';
        break;
      case State::kString:
      case State::kChar:
        literal = true;
        if (c == '\\' && i + 1 < spliced.size()) {
          out.text.push_back(c);
          out.literal.push_back(true);
          c = spliced[++i];
          emit = c;
        } else if ((state == State::kString && c == '"') || (state == State::kChar && c == '\'') || c == '\n') {
          state = State::kCode;
          literal = false;
        }
        break;
      case State::kRawString:
        if (spliced.compare(i, raw_end.size(), raw_end) == 0) {
          out.text.append(raw_end);
          out.literal.insert(out.literal.end(), raw_end.size(), false);
          i += raw_end.size() - 1;
          state = State::kCode;
          continue;
        }
        if (c != '\n') emit = ' ';
        break;
    }
    out.text.push_back(emit);
    out.literal.push_back(literal);
  }
  out.line.resize(out.text.size(), line);
  return out;
}

struct IncludeContext {
  std::string_view source_name;
  std::string_view unit;
  const TreeSnapshot* tree;
  std::string cuda_root;  // realpath of the CUDA include folder; empty when it does not exist
};

absl::Status BadInclude(const IncludeContext& ctx, int line, std::string_view what, std::string_view why) {
  return InvalidRawSource(ctx.source_name, absl::StrCat(Str(ctx.unit), ":", line, ": ", Str(what), " ", Str(why),
                                                        "; allowed: ", kAllowedIncludes));
}

// Empty when `path` passes the path rules, else why not.
std::string CheckIncludePath(std::string_view path) {
  if (path.empty()) return "names no file";
  if (path.front() == '/') return "is an absolute path";
  if (path.find('\\') != std::string_view::npos) return "contains a backslash";
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20) return "contains a control character";
  }
  for (std::string_view part : Split(path, "/", false)) {
    if (part == "..") return "climbs out of its folder with '..'";
  }
  return "";
}

// A regular file below the CUDA include folder, or below its cccl/ folder (CUDA 13 keeps
// the CCCL headers, <cuda/std/...>, <cub/...>, there; the compiler searches it too).
bool IsCudaHeader(const IncludeContext& ctx, std::string_view path) {
  if (ctx.cuda_root.empty()) return false;
  for (std::string_view below : {"/", "/cccl/"}) {
    std::string candidate = absl::StrCat(ctx.cuda_root, Str(below), Str(path));
    char resolved[PATH_MAX];
    if (realpath(candidate.c_str(), resolved) == nullptr) continue;
    std::string_view real(resolved);
    struct stat st {};
    if (real.starts_with(ctx.cuda_root + "/") && stat(resolved, &st) == 0 && S_ISREG(st.st_mode)) return true;
  }
  return false;
}

// Parses `"x"` or `<x>` at the start of `rest`; returns false when it is neither.
bool ParseHeaderName(std::string_view rest, std::string_view* path, std::string_view* after) {
  rest = StripLeading(rest);
  if (rest.empty() || (rest.front() != '"' && rest.front() != '<')) return false;
  char close = rest.front() == '"' ? '"' : '>';
  size_t end = rest.find(close, 1);
  if (end == std::string_view::npos) return false;
  *path = rest.substr(1, end - 1);
  *after = rest.substr(end + 1);
  return true;
}

absl::Status CheckInclude(const IncludeContext& ctx, int line, std::string_view rest) {
  std::string_view path, after;
  if (!ParseHeaderName(rest, &path, &after)) {
    return BadInclude(ctx, line, absl::StrCat("#include ", Str(Strip(rest))),
                      "is not a literal header name (macro includes are refused)");
  }
  std::string shown = absl::StrCat("#include ", Str(rest.substr(0, rest.size() - after.size())));
  shown = std::string(Strip(shown));
  if (!Strip(after).empty()) {
    return BadInclude(ctx, line, shown, absl::StrCat("is followed by '", Str(Strip(after)), "'"));
  }
  if (std::string why = CheckIncludePath(path); !why.empty()) return BadInclude(ctx, line, shown, why);
  if (ctx.tree->files.count(absl::StrCat("include/", Str(path))) != 0) return absl::OkStatus();
  if (IsCudaHeader(ctx, path)) return absl::OkStatus();
  return BadInclude(ctx, line, shown, "names no file of the kernels include folder or the CUDA include folder");
}

// Directives and pragma forms that read files the include rules do not cover.
std::string ForbiddenPragma(std::string_view pragma) {
  std::vector<std::string_view> words = Split(pragma, " \t(", true);
  if (words.empty()) return "";
  if (words[0] == "include_alias") return "#pragma include_alias redirects includes";
  if (words.size() >= 2 && words[0] == "GCC" && words[1] == "dependency") {
    return "#pragma GCC dependency reads another file";
  }
  return "";
}

absl::Status ScanUnit(const IncludeContext& ctx, std::string_view code) {
  CleanCode clean = Clean(code);
  const std::string& text = clean.text;

  // Directives: '#' first on a line.
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    std::string_view line(text.data() + line_start, line_end - line_start);
    int line_no = clean.line[line_start];
    std::string_view body = StripLeading(line);
    if (body.starts_with("#") && !clean.literal[line_start + (line.size() - body.size())]) {
      body = StripLeading(body.substr(1));
      size_t n = 0;
      while (n < body.size() && IsIdentifierChar(body[n])) ++n;
      std::string_view directive = body.substr(0, n);
      std::string_view rest = body.substr(n);
      if (directive == "include") {
        KILN_ABSL_RETURN_IF_ERROR(CheckInclude(ctx, line_no, rest));
      } else if (directive == "include_next" || directive == "import" || directive == "embed") {
        return BadInclude(ctx, line_no, absl::StrCat("#", Str(directive)), "is not supported for raw sources");
      } else if (directive == "pragma") {
        if (std::string why = ForbiddenPragma(Strip(rest)); !why.empty()) {
          return InvalidRawSource(ctx.source_name, absl::StrCat(Str(ctx.unit), ":", line_no, ": ", why,
                                                                ", which raw sources may not do"));
        }
      }
    }
    line_start = line_end + 1;
  }

  // Operators usable anywhere: _Pragma("..."), __has_include(...), __has_include_next(...).
  for (size_t i = 0; i < text.size(); ++i) {
    if (clean.literal[i] || !IsIdentifierStart(text[i]) || (i > 0 && IsIdentifierChar(text[i - 1]))) continue;
    size_t n = i;
    while (n < text.size() && IsIdentifierChar(text[n])) ++n;
    std::string_view word(text.data() + i, n - i);
    int line_no = clean.line[i];
    if (word == "__has_include_next") {
      return BadInclude(ctx, line_no, "__has_include_next", "is not supported for raw sources");
    }
    if (word == "__has_include") {
      std::string_view rest = StripLeading(std::string_view(text).substr(n));
      std::string_view path, after;
      if (!rest.starts_with("(") || !ParseHeaderName(rest.substr(1), &path, &after) ||
          !StripLeading(after).starts_with(")")) {
        return BadInclude(ctx, line_no, "__has_include", "does not name a literal header");
      }
      if (std::string why = CheckIncludePath(path); !why.empty()) {
        return BadInclude(ctx, line_no, absl::StrCat("__has_include(", Str(path), ")"), why);
      }
    }
    if (word == "_Pragma") {
      std::string_view rest = StripLeading(std::string_view(text).substr(n));
      size_t close = rest.find(')');
      std::string_view argument = rest.substr(0, close);
      std::string unescaped(argument);
      unescaped.erase(std::remove(unescaped.begin(), unescaped.end(), '\\'), unescaped.end());
      size_t quote = unescaped.find('"');
      std::string inner = quote == std::string::npos ? unescaped : unescaped.substr(quote + 1);
      if (std::string why = ForbiddenPragma(Strip(inner)); !why.empty()) {
        return InvalidRawSource(ctx.source_name, absl::StrCat(Str(ctx.unit), ":", line_no, ": _Pragma: ", why,
                                                              ", which raw sources may not do"));
      }
    }
    i = n - 1;
  }
  return absl::OkStatus();
}

std::string RealFolder(const std::string& path) {
  char resolved[PATH_MAX];
  if (path.empty() || realpath(path.c_str(), resolved) == nullptr) return "";
  return resolved;
}

}  // namespace

absl::Status CheckRawSourceIncludes(std::string_view source_name, std::string_view unit_name, std::string_view code,
                                    const TreeSnapshot& tree, const std::string& cuda_include_dir) {
  const IncludeContext ctx{source_name, unit_name, &tree, RealFolder(cuda_include_dir)};
  return ScanUnit(ctx, code);
}

}  // namespace kiln::kernels
