// GPU architectures as NVRTC names them ("sm_90a") and the families a spec supports.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::kernels {

// A compile target: compute capability (major*10+minor) and the feature-set suffix.
struct GpuArch {
  int cc = 0;           // 80, 86, 89, 90, 100, 120...
  char variant = '\0';  // '\0' (portable), 'a' (arch-specific: exactly this cc), 'f' (family)

  // Accepts "sm_90a", "sm_90", "compute_90a" is refused (we build cubins, not PTX).
  // Refuses anything NVRTC of this toolkit cannot target, naming what it can.
  static absl::StatusOr<GpuArch> Parse(std::string_view text);
  std::string str() const;  // "sm_90a"
  bool operator==(const GpuArch&) const = default;
};

// The architectures this NVRTC can compile for, as cc numbers (from nvrtcGetSupportedArchs).
const std::vector<int>& SupportedComputeCapabilities();

// A family of targets a spec can be compiled for. Examples:
//   {"sm_80+",  80, 0,  '\0'}  any cc >= 80, compiled for the requested target as given
//   {"sm_90a",  90, 90, 'a'}   Hopper-only features (wgmma, TMA): compiled as sm_90a
struct ArchFamily {
  std::string name;
  int min_cc = 0;
  int max_cc = 0;  // 0: no upper bound
  char variant = '\0';
};

ArchFamily FamilyAtLeast(int min_cc);   // "sm_<min>+"
ArchFamily FamilyArchSpecific(int cc);  // "sm_<cc>a"

// Chooses the arch to compile for. The first family whose cc range holds the requested cc
// wins; an arch-specific family compiles as "sm_<cc>a" (a device of cc 9.0 sends "sm_90"
// and gets sm_90a code only because the spec asked for it). A portable family compiles the
// requested target unchanged. No match is FAILED_PRECONDITION naming the requested target
// and every family of the spec: never a silent compile for another family.
absl::StatusOr<GpuArch> ResolveArch(const GpuArch& requested, const std::vector<ArchFamily>& families,
                                    std::string_view spec_uri);

std::string DescribeFamilies(const std::vector<ArchFamily>& families);  // "sm_80+, sm_90a"

}  // namespace kiln::kernels
