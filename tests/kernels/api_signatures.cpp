#include "tests/kernels/api_signatures.h"

#include <cctype>
#include <regex>

namespace kiln::testing {
namespace {

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> Split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + sep.size();
  }
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// The text from the end of the previous statement, block or access label to `name_at`: the
// return type with its specifiers; preprocessor lines and specifiers dropped, spaces collapsed.
std::string ReturnType(const std::string& text, size_t name_at) {
  size_t begin = name_at;
  while (begin > 0) {
    const char c = text[begin - 1];
    if (c == ';' || c == '{' || c == '}') break;
    if (c == ':' && !(begin >= 2 && text[begin - 2] == ':') && !(begin < text.size() && text[begin] == ':')) break;
    --begin;
  }
  std::string kept;
  size_t line = begin;
  while (line < name_at) {
    size_t end = text.find('\n', line);
    if (end == std::string::npos || end > name_at) end = name_at;
    const std::string piece = text.substr(line, end - line);
    if (Trim(piece).rfind("#", 0) != 0) kept += piece + " ";
    line = end + 1;
  }
  std::string out;
  std::string word;
  auto flush = [&] {
    static const char* const kSpecifiers[] = {"KILN_API",  "inline",   "static", "virtual",
                                              "constexpr", "explicit", "extern"};
    bool specifier = false;
    for (const char* s : kSpecifiers) specifier = specifier || word == s;
    if (!word.empty() && !specifier) out += (out.empty() || out.back() == '<' || out.back() == ':' ? "" : " ") + word;
    word.clear();
  };
  for (char c : kept) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      word += c;
    } else {
      flush();
      if (!std::isspace(static_cast<unsigned char>(c))) out += c;
    }
  }
  flush();
  return out;
}

bool ScopeDeclared(const std::string& text, const std::string& scope) {
  const std::regex ns("namespace\\s+([A-Za-z_][A-Za-z0-9_]*::)*" + scope + "\\b");
  const std::regex type("\\b(class|struct)\\s+(KILN_API\\s+)?" + scope + "\\b");
  return std::regex_search(text, ns) || std::regex_search(text, type);
}

}  // namespace

std::string StripComments(std::string_view code) {
  std::string out(code);
  for (size_t i = 0; i + 1 < out.size();) {
    if (out[i] == '/' && out[i + 1] == '/') {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      size_t end = out.find("*/", i + 2);
      end = end == std::string::npos ? out.size() : end + 2;
      for (; i < end; ++i)
        if (out[i] != '\n') out[i] = ' ';
    } else if (out[i] == '"') {  // skip string literals (a "//" inside one is no comment)
      ++i;
      while (i < out.size() && out[i] != '"' && out[i] != '\n') i += out[i] == '\\' ? 2 : 1;
      ++i;
    } else {
      ++i;
    }
  }
  return out;
}

std::vector<ApiParam> ParseParams(std::string_view text) {
  std::vector<std::string> pieces;
  int depth = 0;
  std::string current;
  for (char c : text) {
    if (c == '(' || c == '<' || c == '{' || c == '[') ++depth;
    if (c == ')' || c == '>' || c == '}' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      pieces.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  pieces.push_back(current);
  std::vector<ApiParam> params;
  for (std::string p : pieces) {
    // Drop a default value: the first '=' at depth 0.
    depth = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == '(' || p[i] == '<' || p[i] == '{') ++depth;
      if (p[i] == ')' || p[i] == '>' || p[i] == '}') --depth;
      if (p[i] == '=' && depth == 0) {
        p = p.substr(0, i);
        break;
      }
    }
    p = Trim(p);
    if (p.empty() || p == "void") continue;
    size_t end = p.size();
    size_t start = end;
    while (start > 0 && (std::isalnum(static_cast<unsigned char>(p[start - 1])) || p[start - 1] == '_')) --start;
    ApiParam param;
    param.name = p.substr(start, end - start);
    param.type = Trim(p.substr(0, start));
    if (param.type.empty()) {  // an unnamed parameter: the whole text is its type
      param.type = p;
      param.name.clear();
    }
    params.push_back(param);
  }
  return params;
}

std::vector<ApiParam> StructFields(const std::vector<std::pair<std::string, std::string>>& headers,
                                   std::string_view type) {
  std::string name(type);
  if (const size_t open = name.find("optional<"); open != std::string::npos) {
    name = name.substr(open + 9);
    name = name.substr(0, name.rfind('>'));
  }
  for (const char* word : {"const ", "struct ", "volatile "}) {
    for (size_t at; (at = name.find(word)) != std::string::npos;) name.erase(at, std::string(word).size());
  }
  std::string base;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':') base += c;
  if (const size_t colons = base.rfind("::"); colons != std::string::npos) base = base.substr(colons + 2);
  if (base.empty()) return {};
  const std::regex named("\\bstruct\\s+(KILN_API\\s+)?" + base + "\\s*\\{");
  const std::regex typedefed("\\}\\s*" + base + "\\s*;");
  for (const auto& [path, raw] : headers) {
    const std::string text = StripComments(raw);
    size_t open = std::string::npos;
    std::smatch m;
    if (std::regex_search(text, m, named)) {
      open = static_cast<size_t>(m.position()) + static_cast<size_t>(m.length()) - 1;
    } else if (std::regex_search(text, m, typedefed)) {
      // typedef struct tag { ... } Name;  -- walk back from the closing brace to its opening one
      size_t close = static_cast<size_t>(m.position());
      int depth = 0;
      for (size_t i = close + 1; i-- > 0;) {
        if (text[i] == '}') ++depth;
        if (text[i] == '{' && --depth == 0) {
          open = i;
          break;
        }
      }
    }
    if (open == std::string::npos) continue;
    int depth = 0;
    size_t close = open;
    for (; close < text.size(); ++close) {
      if (text[close] == '{') ++depth;
      if (text[close] == '}' && --depth == 0) break;
    }
    // Members: statements at depth 1; functions (with a parameter list) and nested bodies skipped.
    std::vector<ApiParam> fields;
    std::string statement;
    depth = 0;
    for (size_t i = open + 1; i < close; ++i) {
      const char c = text[i];
      if (c == '{' || c == '(') ++depth;
      if (c == '}' || c == ')') --depth;
      if (c == '}' && depth == 0) {
        size_t next = i + 1;
        while (next < close && std::isspace(static_cast<unsigned char>(text[next]))) ++next;
        if (next >= close || text[next] != ';') {  // a function body or nested type ended
          statement.clear();
          continue;
        }
      }
      if (c == ';' && depth == 0) {
        std::string st = Trim(statement);
        statement.clear();
        for (const char* access : {"public:", "private:", "protected:"})
          if (st.rfind(access, 0) == 0) st = Trim(st.substr(std::string(access).size()));
        if (st.empty() || st.find('(') != std::string::npos || st.rfind("friend", 0) == 0 ||
            st.rfind("using", 0) == 0 || st.rfind("static", 0) == 0)
          continue;
        auto parsed = ParseParams(st.substr(0, st.find('{')));
        if (parsed.empty() || parsed[0].name.empty()) continue;
        // "double min = 0, max = 0": the later declarators parse as a bare name (no type).
        bool declarators = true;
        for (size_t k = 1; k < parsed.size(); ++k)
          declarators = declarators && IsIdentifier(parsed[k].type) && parsed[k].name.empty();
        if (!declarators) continue;
        fields.push_back(parsed[0]);
        for (size_t k = 1; k < parsed.size(); ++k) fields.push_back({parsed[0].type, parsed[k].type});
        continue;
      }
      statement += c;
    }
    return fields;
  }
  return {};
}

ApiSignature FindDeclaration(const std::vector<std::pair<std::string, std::string>>& headers,
                             std::string_view qualified) {
  const std::vector<std::string> parts = Split(std::string(qualified), "::");
  const std::string& function = parts.back();
  const std::regex call("\\b" + function + "\\s*\\(");
  for (const auto& [path, raw] : headers) {
    const std::string text = StripComments(raw);
    bool scopes = true;
    for (size_t i = 0; i + 1 < parts.size() && scopes; ++i) scopes = ScopeDeclared(text, parts[i]);
    if (!scopes) continue;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), call); it != std::sregex_iterator(); ++it) {
      const size_t name_at = static_cast<size_t>(it->position());
      // A declaration has a return type before the name, on the same statement.
      size_t before = name_at;
      while (before > 0 && std::isspace(static_cast<unsigned char>(text[before - 1]))) --before;
      if (before == 0) continue;
      const char prev = text[before - 1];
      if (!(std::isalnum(static_cast<unsigned char>(prev)) || prev == '_' || prev == '*' || prev == '&' || prev == '>'))
        continue;
      size_t word = before;
      while (word > 0 && (std::isalnum(static_cast<unsigned char>(text[word - 1])) || text[word - 1] == '_')) --word;
      const std::string previous_word = text.substr(word, before - word);
      if (previous_word == "return" || previous_word == "else" || previous_word == "throw" || previous_word == "case" ||
          previous_word == "new")
        continue;  // a call, not a declaration
      // The parameter list, to the matching ')'.
      size_t open = name_at + static_cast<size_t>(it->length()) - 1;
      int depth = 0;
      size_t close = open;
      for (; close < text.size(); ++close) {
        if (text[close] == '(') ++depth;
        if (text[close] == ')' && --depth == 0) break;
      }
      if (close >= text.size()) continue;
      size_t after = close + 1;
      while (after < text.size() &&
             (std::isspace(static_cast<unsigned char>(text[after])) || text.compare(after, 5, "const") == 0 ||
              text.compare(after, 8, "noexcept") == 0 || text.compare(after, 8, "override") == 0)) {
        if (std::isspace(static_cast<unsigned char>(text[after]))) ++after;
        else after += text.compare(after, 5, "const") == 0 ? 5 : 8;
      }
      if (after >= text.size() || (text[after] != ';' && text[after] != '{')) continue;
      ApiSignature sig;
      sig.file = path;
      sig.params = ParseParams(std::string_view(text).substr(open + 1, close - open - 1));
      sig.return_type = ReturnType(text, name_at);
      return sig;
    }
  }
  return {};
}

}  // namespace kiln::testing
