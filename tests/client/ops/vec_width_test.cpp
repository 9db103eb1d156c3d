// The vector width an op asks for: the widest power of two (at most 16 bytes) that divides
// hidden and every row stride and to which every pointer is aligned.
#include <catch2/catch.hpp>

#include "client/ops/norm/norm_plan.h"
#include "client/ops/vec_width.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::client::ChooseVecWidth;

const void* At(uintptr_t a) { return reinterpret_cast<const void*>(a); }
constexpr uintptr_t kBase = 0x7f0000000000;

TEST_CASE("vec width follows the element size, hidden, strides and alignment", "[client][vec]") {
  // 16 bytes: 4 fp32 or 8 fp16/bf16.
  CHECK(ChooseVecWidth(4, 4096, {4096}, {At(kBase)}) == 4);
  CHECK(ChooseVecWidth(2, 4096, {4096}, {At(kBase)}) == 8);
  // hidden decides.
  CHECK(ChooseVecWidth(2, 4100, {4100}, {At(kBase)}) == 4);
  CHECK(ChooseVecWidth(2, 4098, {4098}, {At(kBase)}) == 2);
  CHECK(ChooseVecWidth(2, 4095, {4095}, {At(kBase)}) == 1);
  CHECK(ChooseVecWidth(4, 3, {3}, {At(kBase)}) == 1);
  CHECK(ChooseVecWidth(4, 1, {1}, {At(kBase)}) == 1);
  // A row stride decides.
  CHECK(ChooseVecWidth(2, 4096, {4096, 4100}, {At(kBase)}) == 4);
  CHECK(ChooseVecWidth(2, 4096, {4097}, {At(kBase)}) == 1);
  CHECK(ChooseVecWidth(2, 4096, {0}, {At(kBase)}) == 8);  // broadcast rows
  // A pointer's alignment decides.
  CHECK(ChooseVecWidth(2, 4096, {4096}, {At(kBase), At(kBase + 8)}) == 4);
  CHECK(ChooseVecWidth(2, 4096, {4096}, {At(kBase + 4)}) == 2);
  CHECK(ChooseVecWidth(2, 4096, {4096}, {At(kBase + 2)}) == 1);
  CHECK(ChooseVecWidth(4, 4096, {4096}, {At(kBase + 8)}) == 2);
  // Null pointers (empty tensors) do not constrain.
  CHECK(ChooseVecWidth(2, 4096, {4096}, {nullptr, At(kBase)}) == 8);
}

TEST_CASE("the op plan carries the vec of all its tensors", "[client][vec]") {
  auto plan = [](DType d, uintptr_t out, uintptr_t in, uintptr_t w, int64_t hidden, int64_t in_stride) {
    return kiln::client::PlanRmsNorm(TensorView::Contiguous(reinterpret_cast<void*>(out), d, {3, hidden}),
                                     TensorView::Strided(reinterpret_cast<void*>(in), d, {3, hidden}, {in_stride, 1}),
                                     TensorView::Contiguous(reinterpret_cast<void*>(w), d, {hidden}), 1e-6, "test");
  };
  constexpr uintptr_t out = kBase + (1 << 24), w = kBase + (1 << 25);
  auto widest = plan(DType::kBFloat16, out, kBase, w, 4096, 4096);
  REQUIRE(widest.ok());
  CHECK(widest->vec == 8);
  auto misaligned_weight = plan(DType::kBFloat16, out, kBase, w + 4, 4096, 4096);
  REQUIRE(misaligned_weight.ok());
  CHECK(misaligned_weight->vec == 2);
  auto padded_rows = plan(DType::kBFloat16, out, kBase, w, 4096, 4096 + 4);
  REQUIRE(padded_rows.ok());
  CHECK(padded_rows->vec == 4);
  auto odd_hidden = plan(DType::kFloat32, out, kBase, w, 5, 5);
  REQUIRE(odd_hidden.ok());
  CHECK(odd_hidden->vec == 1);
  auto fp32 = plan(DType::kFloat32, out, kBase, w, 5120, 5120);
  REQUIRE(fp32.ok());
  CHECK(fp32->vec == 4);
}

}  // namespace
