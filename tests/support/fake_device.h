// Fake device addresses for validation tests that never launch: 256-byte aligned, one 4 GiB
// slot per tensor (so tensors in different slots never overlap), never dereferenced. And the
// one assertion those tests make most: a status is INVALID_ARGUMENT with a message fragment.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "kiln/status.h"

namespace kiln::testing {

inline void* FakeDeviceAddress(int slot, uintptr_t offset = 0) {
  constexpr uintptr_t kBase = 0x7f0000000000, kSpan = uintptr_t{1} << 32;
  return reinterpret_cast<void*>(kBase + static_cast<uintptr_t>(slot) * kSpan + offset);
}

inline void RequireInvalid(const Status& status, const std::string& fragment) {
  INFO(status.ToString());
  REQUIRE(status.code() == StatusCode::kInvalidArgument);
  CHECK(status.message().find(fragment) != std::string::npos);
}

}  // namespace kiln::testing
