#include "kernels/ops/generator_support.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/common/op_contract.h"

namespace kiln::kernels {
namespace {

constexpr const char* kConfigName = "kiln_config.cuh";

bool Divides(int vec, int divisor) { return divisor == 0 || divisor % vec == 0; }

}  // namespace

std::vector<std::string> DTypeNames(std::span<const DTypeInfo> table) {
  std::vector<std::string> names;
  for (const DTypeInfo& d : table) names.emplace_back(d.name);
  return names;
}

const DTypeInfo& FindDType(std::span<const DTypeInfo> table, std::string_view name) {
  for (const DTypeInfo& d : table) {
    if (name == d.name) return d;
  }
  return table.front();  // unreachable for a checked param
}

ParamInfo VecParam(std::string help) {
  return {.name = kParamVec,
          .kind = ParamInfo::Kind::kInt,
          .help = std::move(help),
          .min = 1,
          .max = kMaxVectorBytes,
          .power_of_two = true,
          .default_value = kAuto};
}

int WidestVec(int bytes, int divisor) {
  int vec = 1;
  while ((vec * 2) * bytes <= kMaxVectorBytes && Divides(vec * 2, divisor)) vec *= 2;
  return vec;
}

absl::StatusOr<int> ResolveVec(std::string_view op, const ParamValues& values, const DTypeInfo& dtype, int divisor,
                               std::string_view divisor_name) {
  const int widest = WidestVec(dtype.bytes, divisor);
  if (values.IsAuto(kParamVec)) return widest;
  const int vec = values.Int(kParamVec);  // a power of two in 1..16 (ParseParams)
  if (vec * dtype.bytes <= kMaxVectorBytes && Divides(vec, divisor)) return vec;
  std::vector<std::string> allowed;
  for (int v = 1; v * dtype.bytes <= kMaxVectorBytes; v *= 2) {
    if (Divides(v, divisor)) allowed.push_back(std::to_string(v));
  }
  const bool divides = divisor != 0;
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(op), ": param '", kParamVec, "' = '", vec, "' is not allowed for dtype ", dtype.name,
                   divides ? absl::StrCat(" and ", std::string(divisor_name), " = ", divisor) : "",
                   ": vec is a power of two with vec * ", dtype.bytes, " bytes <= ", kMaxVectorBytes,
                   divides ? absl::StrCat(" that divides ", std::string(divisor_name)) : "",
                   "; allowed here: ", absl::StrJoin(allowed, ", "), " (omit it for ", widest, ")"));
}

std::string VecSuffix(int vec, int default_vec) { return vec == default_vec ? "" : absl::StrCat("_v", vec); }

absl::StatusOr<SourceFile> UnitFromTree(std::string_view op, const TreeSnapshot& tree, std::string_view tree_path) {
  absl::StatusOr<std::string_view> unit = tree.Read(std::string(tree_path));
  if (!unit.ok())
    return absl::FailedPreconditionError(
        absl::StrCat(std::string(op), ": the kernels tree is incomplete: ", unit.status().message()));
  return SourceFile{std::string(tree_path.substr(tree_path.rfind('/') + 1)), std::string(*unit),
                    SourceFile::Origin::kKernels, std::string(tree_path)};
}

SourceFile ConfigHeader(std::string_view op, std::string_view uri, std::string_view generator_file,
                        const std::vector<std::pair<std::string, std::string>>& defines) {
  std::string text = absl::StrCat("// ", kConfigName, " of ", std::string(uri), ", rendered by the ", std::string(op),
                                  " generator\n// (", std::string(generator_file),
                                  ") from the request params. Do not edit.\n#pragma once\n");
  for (const auto& [name, value] : defines) absl::StrAppend(&text, "#define ", name, " ", value, "\n");
  return {kConfigName, std::move(text), SourceFile::Origin::kGenerated, ""};
}

}  // namespace kiln::kernels
