// What every generator test needs: the kernels tree of the source checkout (read once), the
// builtin registry's Generate on it, a Generate that must succeed, and a substring check that
// takes std::string, std::string_view and absl::string_view alike (Debian's abseil has its own
// string_view, so status messages are not std::string_view).
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/jit/op_generator.h"

namespace kiln::kernels::generator_test {

const TreeSnapshot& Tree();

absl::StatusOr<JitSpec> Generate(const std::string& op, const Params& params);

// REQUIREs success (the status is shown when it fails).
JitSpec MustGenerate(const std::string& op, const Params& params);

template <typename Text>
bool Contains(const Text& text, std::string_view part) {
  return std::string_view(text.data(), text.size()).find(part) != std::string_view::npos;
}

}  // namespace kiln::kernels::generator_test
