#include "client/core/api/binary_switch.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::client {

bool BinarySwitch::On() const {
  const int forced = forced_.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  const int read = read_.load(std::memory_order_acquire);
  if (read >= 0) return read == 1;
  const bool on = FromEnvironment();
  // Two threads may both read the environment the first time; only the first says anything.
  int expected = -1;
  if (!read_.compare_exchange_strong(expected, on ? 1 : 0, std::memory_order_acq_rel)) return expected == 1;
  const char* text = std::getenv(variable_);
  if (text != nullptr && (std::strcmp(text, "0") == 0 || std::strcmp(text, "1") == 0)) {
    if (on != default_on_) std::fprintf(stderr, "kiln: %s=%s: %s\n", variable_, text, note_);
  } else if (text != nullptr) {
    std::fprintf(stderr, "kiln: %s='%.64s' is not valid: expected 0 or 1; the default (%d) is used\n", variable_, text,
                 default_on_ ? 1 : 0);
  }
  return on;
}

bool BinarySwitch::FromEnvironment() const {
  const char* text = std::getenv(variable_);
  if (text == nullptr) return default_on_;
  if (std::strcmp(text, "1") == 0) return true;
  if (std::strcmp(text, "0") == 0) return false;
  return default_on_;
}

}  // namespace kiln::client
