#include "client/cli/output.h"

#include <ctime>
#include <map>

#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>

namespace kiln::cli {
namespace {

std::string Json(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  std::string text;
  auto status = google::protobuf::util::MessageToJsonString(message, &text, options);
  if (!status.ok()) return "{\"error\": \"cannot print the reply as JSON\"}";
  if (pretty && !text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string Fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message) { return Json(message, true); }
std::string ToJsonLine(const google::protobuf::Message& message) { return Json(message, false); }

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return std::to_string(bytes) + " B";
  return Fixed(value, value < 10 ? 1 : 0) + " " + units[unit];
}

std::string HumanMs(double ms) {
  if (ms < 0) ms = 0;
  if (ms < 1) return Fixed(ms * 1000, 0) + " µs";
  if (ms < 1000) return Fixed(ms, ms < 10 ? 2 : 1) + " ms";
  return Fixed(ms / 1000, 2) + " s";
}

std::string HumanTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  std::time_t seconds = static_cast<std::time_t>(t.seconds());
  std::tm local{};
  localtime_r(&seconds, &local);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S", &local);
  return buffer;
}

std::string MapText(const google::protobuf::Map<std::string, std::string>& map) {
  std::map<std::string, std::string> sorted(map.begin(), map.end());
  std::string s;
  for (const auto& [k, v] : sorted) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s.empty() ? "-" : s;
}

std::string LaunchText(const google::protobuf::RepeatedPtrField<v1::EntryLaunch>& launch) {
  std::string s;
  for (const v1::EntryLaunch& l : launch) {
    s += (s.empty() ? "" : "; ") + l.entry() + " block=" + std::to_string(l.block());
    if (l.dynamic_smem() != 0) s += " dynamic_smem=" + std::to_string(l.dynamic_smem());
    if (l.items_per_block() != 0) s += " items_per_block=" + std::to_string(l.items_per_block());
    if (l.max_blocks() != 0) s += " max_blocks=" + std::to_string(l.max_blocks());
  }
  return s.empty() ? "-" : s;
}

void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  auto width = [](const std::string& s) {
    size_t n = 0;  // code points, so "µs" counts as two
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], width(row[i]));
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - width(row[i]) + 2, ' ');
    }
    out << line << "\n";
  }
}

}  // namespace kiln::cli
