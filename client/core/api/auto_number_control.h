// AutoNumberControl: a diagnostic control whose value is `auto` (or unset: the library decides)
// or a whole number in a range (KILN_DECODE_CHUNK, KILN_SAMPLING_CLUSTER,
// KILN_FUSED_MOE_DOWN_COLUMN_GROUPS, KILN_FUSED_MOE_FP8_PREFETCH: docs/configuration.md,
// docs/diagnostic-controls.md); the
// sibling of BinarySwitch (binary_switch.h) for on/off controls. Callers read it once per process
// (a function-local static) and keep their own test overrides.
#pragma once

#include <cstdint>

namespace kiln::client {

struct AutoNumberControl {
  const char* variable;
  int64_t lo;
  int64_t hi;
  // What a valid value is, as the refusal says it: "expected <valid>; auto is used".
  const char* valid;
  bool powers_of_two = false;  // only the powers of two in [lo, hi]
};

// 0 for `text` null or "auto"; the number when `text` is decimal digits (no sign, no space) in
// [lo, hi] (and a power of two where asked); else 0 after "kiln: VAR='TEXT' is not valid:
// expected <valid>; auto is used" on stderr.
int64_t ParseAutoNumberControl(const AutoNumberControl& control, const char* text);

// ParseAutoNumberControl of the variable's value in this process's environment.
int64_t AutoNumberFromEnvironment(const AutoNumberControl& control);

}  // namespace kiln::client
