#include "client/core/api/auto_number_control.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::client {

int64_t ParseAutoNumberControl(const AutoNumberControl& c, const char* text) {
  if (text == nullptr || std::strcmp(text, "auto") == 0) return 0;
  // At most 18 digits: no overflow of int64_t on the way.
  int64_t value = 0;
  size_t digits = 0;
  for (const char* p = text; *p != '\0'; ++p, ++digits) {
    if (*p < '0' || *p > '9' || digits == 18) {
      digits = 0;
      break;
    }
    value = value * 10 + (*p - '0');
  }
  const bool valid = digits > 0 && value >= c.lo && value <= c.hi && (!c.powers_of_two || (value & (value - 1)) == 0);
  if (!valid) {
    std::fprintf(stderr, "kiln: %s='%.64s' is not valid: expected %s; auto is used\n", c.variable, text, c.valid);
    return 0;
  }
  return value;
}

int64_t AutoNumberFromEnvironment(const AutoNumberControl& c) {
  return ParseAutoNumberControl(c, std::getenv(c.variable));
}

}  // namespace kiln::client
