// BinarySwitch: a process-wide on/off control from an environment variable ("0" or "1"), read
// once, for the client's diagnostic controls (KILN_PDL, KILN_GEMM_PDL, KILN_GEMM_TMA_STORE,
// KILN_GEMM_GEMV, KILN_FUSED_MOE_PDL, KILN_PREFILL_TMA_KV: docs/configuration.md,
// docs/diagnostic-controls.md). An `auto`-or-number control: AutoNumberControl
// (auto_number_control.h).
#pragma once

#include <atomic>

namespace kiln::client {

// An on/off control read once per process from an environment variable ("0" or "1"), which
// tests may override. A value that turns it away from its default is said once on stderr
// ("kiln: VAR=V: <note>"); any other value is reported and the default used.
class BinarySwitch {
 public:
  constexpr BinarySwitch(const char* variable, bool default_on, const char* note)
      : variable_(variable), default_on_(default_on), note_(note) {}
  BinarySwitch(const BinarySwitch&) = delete;
  BinarySwitch& operator=(const BinarySwitch&) = delete;

  bool On() const;
  // 0 or 1: forced; -1: as the environment says again.
  void SetForTesting(int on) { forced_.store(on, std::memory_order_relaxed); }
  const char* variable() const { return variable_; }

 private:
  bool FromEnvironment() const;

  const char* variable_;
  bool default_on_;
  const char* note_;
  std::atomic<int> forced_{-1};
  mutable std::atomic<int> read_{-1};  // the environment's answer once read
};

}  // namespace kiln::client
