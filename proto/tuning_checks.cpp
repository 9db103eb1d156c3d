#include "proto/tuning_checks.h"

#include <cmath>
#include <set>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/unknown_field_set.h>

#include "proto/input_limits.h"

namespace kiln::proto {
namespace {

bool Lower(char c) { return c >= 'a' && c <= 'z'; }
bool Digit(char c) { return c >= '0' && c <= '9'; }
bool Alnum(char c) { return Lower(c) || Digit(c) || (c >= 'A' && c <= 'Z'); }

// "" when `value` has 1..max characters all allowed by `ok`, else the message.
template <typename Allowed>
std::string Word(std::string_view field, std::string_view value, size_t max, Allowed ok, const char* form) {
  std::string problem;
  if (value.empty()) {
    problem = "is empty";
  } else if (value.size() > max) {
    problem = "is " + std::to_string(value.size()) + " characters long (at most " + std::to_string(max) + ")";
  } else {
    for (char c : value) {
      if (!ok(c)) {
        problem = "has the character '" + std::string(1, c) + "'";
        break;
      }
    }
  }
  if (problem.empty()) return "";
  return std::string(field) + " " + QuoteInput(value) + " " + problem + "; expected " + form;
}

std::string Join(std::string_view a, std::string_view b) { return std::string(a) + "." + std::string(b); }

}  // namespace

std::string OpNameProblem(std::string_view field, std::string_view op) {
  std::string p = Word(
      field, op, 64, [](char c) { return Lower(c) || Digit(c) || c == '_'; },
      "an op name: 1 to 64 of a-z, 0-9 and _, e.g. gemm");
  if (p.empty() && !Lower(op[0]))
    p = std::string(field) + " " + QuoteInput(op) + " must start with a letter, e.g. gemm";
  return p;
}

std::string BucketProblem(std::string_view field, std::string_view bucket) {
  return Word(
      field, bucket, 256,
      [](char c) {
        return Alnum(c) || c == '.' || c == '_' || c == ':' || c == '=' || c == ',' || c == '+' || c == '-';
      },
      "a shape bucket key: 1 to 256 of A-Z, a-z, 0-9 and ._:=,+- (no spaces), e.g. bf16.obf16.m4096.n4096.k4096");
}

std::string TacticTextProblem(std::string_view field, std::string_view tactic) {
  return Word(
      field, tactic, 64, [](char c) { return Alnum(c) || c == '.' || c == '_' || c == '-'; },
      "a tactic: 1 to 64 of A-Z, a-z, 0-9 and ._-, e.g. t128x256x64s4g8");
}

std::string TuningEnvironmentProblem(std::string_view field, const v1::TuningEnvironment& e) {
  const std::string& gpu = e.gpu_name();
  if (gpu.empty() || gpu.size() > 256)
    return Join(field, "gpu_name") + " " + QuoteInput(gpu) + " must be the device's name, 1 to 256 characters";
  for (char c : gpu)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return Join(field, "gpu_name") + " " + QuoteInput(gpu) + " has a control character";
  auto positive = [&](const char* name, long long v) -> std::string {
    if (v > 0) return "";
    return Join(field, name) + " " + std::to_string(v) + " must be positive (is it set?)";
  };
  for (auto [name, value] : {std::pair<const char*, long long>{"sm_count", e.sm_count()},
                             {"driver_version", e.driver_version()},
                             {"tactic_space_version", e.tactic_space_version()}}) {
    if (auto p = positive(name, value); !p.empty()) return p;
  }
  auto version = [&](const char* name, const std::string& v) {
    return Word(
        Join(field, name), v, 64, [](char c) { return Alnum(c) || c == '.' || c == '+' || c == '-' || c == '_'; },
        "a version such as 13.0 or 0.1.0");
  };
  if (auto p = version("nvrtc_version", e.nvrtc_version()); !p.empty()) return p;
  return version("kiln_version", e.kiln_version());
}

std::string TuningRecordProblem(std::string_view field, const v1::TuningRecord& r) {
  if (auto p = OpNameProblem(Join(field, "op"), r.op()); !p.empty()) return p;
  if (auto p = BucketProblem(Join(field, "bucket"), r.bucket()); !p.empty()) return p;
  if (!r.has_environment()) return Join(field, "environment") + " is missing: a record is reused only where it matches";
  if (auto p = TuningEnvironmentProblem(Join(field, "environment"), r.environment()); !p.empty()) return p;
  if (auto p = TacticTextProblem(Join(field, "tactic"), r.tactic()); !p.empty()) return p;
  if (!std::isfinite(r.median_us()) || r.median_us() <= 0)
    return Join(field, "median_us") + " " + std::to_string(r.median_us()) + " must be a positive time";
  if (auto p = Word(
          Join(field, "timing"), r.timing(), 32, [](char c) { return Lower(c) || Digit(c) || c == '_' || c == '-'; },
          "the timing mechanism: cupti, events or globaltimer");
      !p.empty())
    return p;
  std::set<std::string> seen;
  bool chosen_ok = false;
  for (int i = 0; i < r.candidates_size(); ++i) {
    const v1::TuningCandidate& c = r.candidates(i);
    const std::string at = Join(field, "candidates[" + std::to_string(i) + "]");
    if (auto p = TacticTextProblem(Join(at, "tactic"), c.tactic()); !p.empty()) return p;
    if (!seen.insert(c.tactic()).second) return Join(at, "tactic") + " '" + c.tactic() + "' is listed twice";
    if (auto p = LengthProblem(Join(at, "failure"), c.failure(), kMaxTuningFailureBytes); !p.empty()) return p;
    if (c.ok()) {
      if (!std::isfinite(c.median_us()) || c.median_us() <= 0)
        return Join(at, "median_us") + " " + std::to_string(c.median_us()) + " must be a positive time (ok is true)";
      if (!c.failure().empty()) return Join(at, "failure") + " is set but ok is true";
      chosen_ok = chosen_ok || c.tactic() == r.tactic();
    } else if (c.failure().empty()) {
      return Join(at, "failure") + " is empty: a failed candidate says why (ok is false)";
    }
  }
  if (r.candidates_size() > 0 && !chosen_ok)
    return Join(field, "tactic") + " '" + r.tactic() + "' is not one of the candidates that ran ok";
  return "";
}

std::string UnknownFieldsProblem(std::string_view field, const google::protobuf::Message& message) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty())
    return std::string(field) + ": unknown field number " + std::to_string(unknown.field(0).number()) + " in " +
           message.GetDescriptor()->full_name() + " (written by a newer Kiln? this one cannot keep it)";
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const auto* f : fields) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string name = Join(field, f->name());
    if (f->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, f); ++i) {
        auto p = UnknownFieldsProblem(name + "[" + std::to_string(i) + "]",
                                      reflection->GetRepeatedMessage(message, f, i));
        if (!p.empty()) return p;
      }
    } else if (auto p = UnknownFieldsProblem(name, reflection->GetMessage(message, f)); !p.empty()) {
      return p;
    }
  }
  return "";
}

}  // namespace kiln::proto
