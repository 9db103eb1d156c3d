#include "client/core/api/auto_number_control.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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

int64_t AutoNumberSetting::Value() const {
  const int64_t forced = forced_.load(std::memory_order_relaxed);
  if (forced >= 0) return forced;
  const int64_t read = read_.load(std::memory_order_acquire);
  if (read >= 0) return read;
  const int64_t value = AutoNumberFromEnvironment(control_);
  // Two threads may both read the environment the first time; only the first says anything.
  int64_t expected = -1;
  if (!read_.compare_exchange_strong(expected, value, std::memory_order_acq_rel)) return expected;
  if (value > 0) {
    std::string note = note_;
    const std::string number = std::to_string(value);
    for (size_t at = note.find("{}"); at != std::string::npos; at = note.find("{}", at + number.size()))
      note.replace(at, 2, number);
    std::fprintf(stderr, "kiln: %s=%lld: %s\n", control_.variable, static_cast<long long>(value), note.c_str());
  }
  return value;
}

}  // namespace kiln::client
