#include "proto/input_limits.h"

#include <cstdio>

namespace kiln::proto {

std::string QuoteInput(std::string_view input) {
  const std::string_view shown = input.substr(0, kMaxQuotedBytes);
  std::string out = "'";
  for (char c : shown) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  out += "'";
  if (input.size() > shown.size()) out += "... (" + std::to_string(input.size() - shown.size()) + " more bytes)";
  return out;
}

std::string LengthProblem(std::string_view field, std::string_view value, size_t limit) {
  if (value.size() <= limit) return "";
  return std::string(field) + " is " + std::to_string(value.size()) + " bytes long (it starts " + QuoteInput(value) +
         "); at most " + std::to_string(limit) + " bytes";
}

std::string CountProblem(std::string_view field, size_t count, size_t limit) {
  if (count <= limit) return "";
  return std::string(field) + " has " + std::to_string(count) + " items; at most " + std::to_string(limit);
}

}  // namespace kiln::proto
