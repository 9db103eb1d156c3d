#include "client/core/loader/arch_compat.h"

#include <cctype>

namespace kiln::client {

bool CubinRunsOn(std::string_view arch, int cc_major, int cc_minor) {
  if (arch.substr(0, 3) != "sm_") return true;
  arch.remove_prefix(3);
  int number = 0;
  size_t digits = 0;
  while (digits < arch.size() && std::isdigit(static_cast<unsigned char>(arch[digits]))) {
    number = number * 10 + (arch[digits] - '0');
    ++digits;
  }
  if (digits < 2) return true;
  const std::string_view variant = arch.substr(digits);
  const int major = number / 10, minor = number % 10;
  if (variant == "a") return cc_major == major && cc_minor == minor;
  if (variant.empty() || variant == "f") return cc_major == major && cc_minor >= minor;
  return true;
}

}  // namespace kiln::client
