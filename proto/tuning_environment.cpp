#include "proto/tuning_environment.h"

namespace kiln::proto {
namespace {

std::string Text(const std::string& name, const std::string& value) {
  return name + "=" + std::to_string(value.size()) + ":" + value + ";";
}
std::string Number(const std::string& name, long long value) { return name + "=" + std::to_string(value) + ";"; }

void Compare(std::vector<std::string>* out, const char* field, const std::string& stored, const std::string& here) {
  if (stored != here) out->push_back(std::string(field) + ": stored '" + stored + "', here '" + here + "'");
}
void Compare(std::vector<std::string>* out, const char* field, long long stored, long long here) {
  if (stored != here)
    out->push_back(std::string(field) + ": stored " + std::to_string(stored) + ", here " + std::to_string(here));
}

}  // namespace

std::string TuningEnvironmentKey(const v1::TuningEnvironment& e) {
  return Text("gpu_name", e.gpu_name()) + Number("sm_count", e.sm_count()) +
         Number("driver_version", e.driver_version()) + Text("nvrtc_version", e.nvrtc_version()) +
         Text("kiln_version", e.kiln_version()) + Number("tactic_space_version", e.tactic_space_version());
}

std::vector<std::string> TuningEnvironmentDifferences(const v1::TuningEnvironment& stored,
                                                      const v1::TuningEnvironment& here) {
  std::vector<std::string> out;
  Compare(&out, "gpu_name", stored.gpu_name(), here.gpu_name());
  Compare(&out, "sm_count", stored.sm_count(), here.sm_count());
  Compare(&out, "driver_version", stored.driver_version(), here.driver_version());
  Compare(&out, "nvrtc_version", stored.nvrtc_version(), here.nvrtc_version());
  Compare(&out, "kiln_version", stored.kiln_version(), here.kiln_version());
  Compare(&out, "tactic_space_version", stored.tactic_space_version(), here.tactic_space_version());
  return out;
}

std::string DescribeTuningMismatch(const std::vector<v1::TuningEnvironment>& stored,
                                   const v1::TuningEnvironment& here) {
  constexpr size_t kDescribed = 3;  // a store may hold a record per GPU kind: the line stays short
  std::string out = stored.size() == 1 ? "1 record under another environment: "
                                       : std::to_string(stored.size()) + " records under other environments: ";
  for (size_t i = 0; i < stored.size() && i < kDescribed; ++i) {
    std::string fields;
    for (const std::string& d : TuningEnvironmentDifferences(stored[i], here))
      fields += (fields.empty() ? "" : ", ") + d;
    out += (i == 0 ? "" : "; ") + (fields.empty() ? std::string("the same environment") : fields);
  }
  if (stored.size() > kDescribed) out += "; and " + std::to_string(stored.size() - kDescribed) + " more";
  return out;
}

}  // namespace kiln::proto
