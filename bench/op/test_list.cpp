#include "bench/op/test_list.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "client/core/api/invalid_argument.h"

namespace kiln::bench {
namespace {

using client::InvalidArgument;

bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool IsName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

}  // namespace

StatusOr<ShapeAxes> ParseShape(std::string_view text) {
  if (text.empty()) return InvalidArgument("shape: empty; expected axis=value pairs such as rows=4096,hidden=4096");
  ShapeAxes shape;
  for (std::string_view item : Split(text, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return InvalidArgument("shape '" + std::string(text) + "': '" + std::string(item) + "' is not axis=value");
    const std::string name(item.substr(0, eq));
    const std::string_view value = item.substr(eq + 1);
    if (!IsIdentifier(name))
      return InvalidArgument("shape '" + std::string(text) + "': axis name '" + name + "' is not an identifier");
    if (value.empty() || value.size() > 15 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      return InvalidArgument("shape '" + std::string(text) + "': " + name + "='" + std::string(value) +
                             "' is not a positive integer");
    const int64_t v = std::stoll(std::string(value));
    if (v <= 0)
      return InvalidArgument("shape '" + std::string(text) + "': " + name + " must be positive, found " +
                             std::string(value));
    if (AxisValue(shape, name) >= 0)
      return InvalidArgument("shape '" + std::string(text) + "': axis '" + name + "' given twice");
    shape.emplace_back(name, v);
  }
  return shape;
}

std::string FormatShape(const ShapeAxes& shape) {
  std::string out;
  for (const auto& [name, value] : shape) out += (out.empty() ? "" : ",") + name + "=" + std::to_string(value);
  return out;
}

StatusOr<std::vector<std::string>> ParseNameList(std::string_view text, std::string_view what) {
  std::vector<std::string> out;
  for (std::string_view item : Split(text, ',')) {
    if (!IsName(item))
      return InvalidArgument(std::string(what) + " '" + std::string(text) + "': '" + std::string(item) +
                             "' is not a name (letters, digits, _ . -)");
    if (std::find(out.begin(), out.end(), item) != out.end())
      return InvalidArgument(std::string(what) + " '" + std::string(text) + "': '" + std::string(item) +
                             "' given twice");
    out.emplace_back(item);
  }
  return out;
}

int64_t AxisValue(const ShapeAxes& shape, std::string_view axis) {
  for (const auto& [name, value] : shape)
    if (name == axis) return value;
  return -1;
}

StatusOr<std::vector<BenchCase>> ParseTestList(std::string_view text, std::string_view file_name) {
  std::vector<BenchCase> cases;
  int line_number = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_number;
    const std::string where = std::string(file_name) + ":" + std::to_string(line_number);
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::istringstream words{std::string(line)};
    std::vector<std::string> columns;
    for (std::string w; words >> w;) columns.push_back(w);
    if (columns.empty()) continue;
    if (columns.size() < 4 || columns.size() > 5)
      return InvalidArgument(where + ": expected 'routine dtype shape backends [label]', found " +
                             std::to_string(columns.size()) + " columns");
    BenchCase c;
    c.origin = where;
    c.routine = columns[0];
    c.dtype = columns[1];
    if (!IsIdentifier(c.routine)) return InvalidArgument(where + ": routine '" + c.routine + "' is not a name");
    if (!IsName(c.dtype)) return InvalidArgument(where + ": dtype '" + c.dtype + "' is not a name");
    auto shape = ParseShape(columns[2]);
    if (!shape.ok()) return InvalidArgument(where + ": " + shape.status().message());
    c.shape = std::move(*shape);
    auto backends = ParseNameList(columns[3], "backends");
    if (!backends.ok()) return InvalidArgument(where + ": " + backends.status().message());
    c.backends = std::move(*backends);
    if (columns.size() == 5) c.label = columns[4];
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string FormatCase(const BenchCase& c) {
  auto pad = [](std::string s, size_t width) {
    if (s.size() < width) s.resize(width, ' ');
    return s + " ";
  };
  std::string backends;
  for (const auto& b : c.backends) backends += (backends.empty() ? "" : ",") + b;
  std::string line = pad(c.routine, 24) + pad(c.dtype, 5) + pad(FormatShape(c.shape), 32);
  if (c.label.empty()) return line + backends;
  return line + pad(backends, 16) + c.label;
}

}  // namespace kiln::bench
