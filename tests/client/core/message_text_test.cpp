// client/core/api/message_text.h and invalid_argument.h: the spellings every client message
// is built from, which the op validation tests then assert byte for byte.
#include "client/core/api/message_text.h"

#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "client/core/api/invalid_argument.h"

namespace kiln::client {
namespace {

TEST_CASE("InvalidArgument names the argument first", "[client][message]") {
  const Status whole = InvalidArgument("q: expected a 3-D tensor");
  CHECK(whole.code() == StatusCode::kInvalidArgument);
  CHECK(whole.message() == "q: expected a 3-D tensor");
  const Status named = InvalidArgument("k_cache", "expected dtype bf16, found fp16");
  CHECK(named.code() == StatusCode::kInvalidArgument);
  CHECK(named.message() == "k_cache: expected dtype bf16, found fp16");
  CHECK(InvalidArgument("kiln_rmsnorm", "").message() == "kiln_rmsnorm: ");
}

TEST_CASE("PointerText is %p's spelling on every libc", "[client][message]") {
  CHECK(PointerText(nullptr) == "(nil)");
  CHECK(PointerText(reinterpret_cast<const void*>(uintptr_t{0x7f0020000001})) == "0x7f0020000001");
  CHECK(PointerText(uintptr_t{0x7f0020000001}) == "0x7f0020000001");
  CHECK(PointerText(uintptr_t{0x10}) == "0x10");
  CHECK(PointerText(UINTPTR_MAX) == "0xffffffffffffffff");
}

TEST_CASE("lists, shapes, strides and launch dims", "[client][message]") {
  CHECK(ListText({}) == "[]");
  CHECK(ListText({7}) == "[7]");
  CHECK(ListText({7, 4096, -1}) == "[7, 4096, -1]");
  const std::vector<int64_t> dims = {2, 3};
  CHECK(ListText(dims) == "[2, 3]");

  TensorView t = TensorView::Strided(nullptr, DType::kBFloat16, {7, 4096}, {8192, 1});
  CHECK(ShapeText(t) == "[7, 4096]");
  CHECK(StridesText(t) == "[8192, 1]");
  t.ndim = -1;  // what the factories give for too many dims
  CHECK(ShapeText(t) == "[]");
  t.ndim = 99;  // never read past the arrays
  CHECK(ShapeText(t) == "[7, 4096, 0, 0, 0, 0, 0, 0]");

  CHECK(DimsText(Dim3{7, 1, 1}) == "(7, 1, 1)");
}

TEST_CASE("NumberText is %g", "[client][message]") {
  CHECK(NumberText(1e-6) == "1e-06");
  CHECK(NumberText(0.5) == "0.5");
  CHECK(NumberText(10000.0) == "10000");
  CHECK(NumberText(1234567.0) == "1.23457e+06");
  CHECK(NumberText(-0.0) == "-0");
}

}  // namespace
}  // namespace kiln::client
