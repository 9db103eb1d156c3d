// AutoNumberControl: a diagnostic control whose value is `auto` (or unset: the library decides)
// or a whole number in a range (KILN_DECODE_CHUNK, KILN_SAMPLING_CLUSTER,
// KILN_FUSED_MOE_DOWN_COLUMN_GROUPS, KILN_FUSED_MOE_FP8_PREFETCH, KILN_FUSED_MOE_FP8_K_PARTS,
// KILN_FP8_GEMM_GEMV_K_PARTS:
// docs/configuration.md, docs/diagnostic-controls.md); the sibling of BinarySwitch
// (binary_switch.h) for on/off controls. AutoNumberSetting reads one once per process, says a
// number once on stderr and takes a test override; the bare parse serves callers that keep
// their own.
#pragma once

#include <atomic>
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

// An AutoNumberControl read once per process, which tests may override. Value(): the forced
// number, else the environment's (read on the first call; a number is said once on stderr as
// "kiln: VAR=N: <note>", each "{}" of the note replaced by N; an invalid value is reported and
// auto used), else 0 (auto: the caller's rule decides).
class AutoNumberSetting {
 public:
  constexpr AutoNumberSetting(AutoNumberControl control, const char* note) : control_(control), note_(note) {}
  AutoNumberSetting(const AutoNumberSetting&) = delete;
  AutoNumberSetting& operator=(const AutoNumberSetting&) = delete;

  int64_t Value() const;
  // n >= 0: forced to n (0: auto); n < 0: as the environment says again.
  void SetForTesting(int64_t n) { forced_.store(n, std::memory_order_relaxed); }

 private:
  AutoNumberControl control_;
  const char* note_;
  std::atomic<int64_t> forced_{-1};
  mutable std::atomic<int64_t> read_{-1};  // the environment's answer once read
};

}  // namespace kiln::client
