#include "kernels/jit/arch.h"

#include <nvrtc.h>

#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::kernels {
namespace {

// 'a' (arch-specific) targets exist from sm_90 on, 'f' (family-specific) from sm_100 on.
constexpr int kFirstArchSpecificCc = 90;
constexpr int kFirstFamilySpecificCc = 100;

std::string DescribeSupported() {
  std::vector<std::string> names;
  for (int cc : SupportedComputeCapabilities()) names.push_back(absl::StrCat("sm_", cc));
  return absl::StrCat(absl::StrJoin(names, ", "), " (suffix 'a' from sm_", kFirstArchSpecificCc, ", 'f' from sm_",
                      kFirstFamilySpecificCc, ")");
}

absl::Status BadArch(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("target arch '", std::string(text), "' ", std::string(why),
                                                 "; this NVRTC can build: ", DescribeSupported()));
}

}  // namespace

const std::vector<int>& SupportedComputeCapabilities() {
  static const std::vector<int> archs = [] {
    int count = 0;
    std::vector<int> result;
    if (nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      result.resize(count);
      if (nvrtcGetSupportedArchs(result.data()) != NVRTC_SUCCESS) result.clear();
    }
    std::sort(result.begin(), result.end());
    return result;
  }();
  return archs;
}

absl::StatusOr<GpuArch> GpuArch::Parse(std::string_view text) {
  if (text.starts_with("compute_")) {
    return BadArch(text, absl::StrCat("names a virtual (PTX) architecture, but Kiln builds cubins: "
                                      "ask for sm_",
                                      std::string(text.substr(8))));
  }
  if (!text.starts_with("sm_")) return BadArch(text, "is not of the form sm_<cc>[a|f] (e.g. sm_90a)");
  std::string_view rest = text.substr(3);
  GpuArch arch;
  if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) {
    arch.variant = rest.back();
    rest.remove_suffix(1);
  }
  if (rest.empty() || rest.size() > 3 || rest.front() == '0' ||
      !std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return BadArch(text, "is not of the form sm_<cc>[a|f] (e.g. sm_90a)");
  }
  for (char c : rest) arch.cc = arch.cc * 10 + (c - '0');
  const auto& supported = SupportedComputeCapabilities();
  if (!std::binary_search(supported.begin(), supported.end(), arch.cc)) {
    return BadArch(text, "is not supported by this NVRTC");
  }
  if (arch.variant == 'a' && arch.cc < kFirstArchSpecificCc) {
    return BadArch(text, absl::StrCat("has no arch-specific ('a') variant before sm_", kFirstArchSpecificCc));
  }
  if (arch.variant == 'f' && arch.cc < kFirstFamilySpecificCc) {
    return BadArch(text, absl::StrCat("has no family-specific ('f') variant before sm_", kFirstFamilySpecificCc));
  }
  return arch;
}

std::string GpuArch::str() const {
  std::string s = absl::StrCat("sm_", cc);
  if (variant != '\0') s.push_back(variant);
  return s;
}

ArchFamily FamilyAtLeast(int min_cc) { return ArchFamily{absl::StrCat("sm_", min_cc, "+"), min_cc, 0, '\0'}; }

ArchFamily FamilyArchSpecific(int cc) { return ArchFamily{absl::StrCat("sm_", cc, "a"), cc, cc, 'a'}; }

std::string DescribeFamilies(const std::vector<ArchFamily>& families) {
  std::vector<std::string> names;
  for (const ArchFamily& family : families) names.push_back(family.name);
  return names.empty() ? "(none)" : absl::StrJoin(names, ", ");
}

absl::StatusOr<GpuArch> ResolveArch(const GpuArch& requested, const std::vector<ArchFamily>& families,
                                    std::string_view spec_uri) {
  for (const ArchFamily& family : families) {
    if (requested.cc < family.min_cc) continue;
    if (family.max_cc != 0 && requested.cc > family.max_cc) continue;
    // A portable family builds exactly what the device asked for; a variant family builds
    // its own variant of the device's cc (sm_90 device + sm_90a family -> sm_90a).
    if (family.variant == '\0') return requested;
    return GpuArch{requested.cc, family.variant};
  }
  return absl::FailedPreconditionError(
      absl::StrCat("'", std::string(spec_uri), "' cannot be built for the requested target ", requested.str(),
                   ": it supports only ", DescribeFamilies(families),
                   ". Kiln never compiles for another family; run it on a device of a supported arch "
                   "(or use a kernel that supports ",
                   requested.str(), ")"));
}

}  // namespace kiln::kernels
