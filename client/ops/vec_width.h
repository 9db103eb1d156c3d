// The vector width of a row-wise kernel: how many elements one thread loads or stores at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace kiln::client {

inline constexpr size_t kMaxVectorBytes = 16;  // one 128-bit load or store

// The largest power of two `vec` with vec * element_size <= 16 that divides `hidden` and
// every row stride (in elements), and such that every pointer is aligned to vec * element_size
// bytes. 1 when nothing wider fits. Null pointers (empty tensors) do not constrain it.
int ChooseVecWidth(size_t element_size, int64_t hidden, std::initializer_list<int64_t> row_strides,
                   std::initializer_list<const void*> pointers);

// The pointers' part of that choice alone: the largest power of two <= `vec` such that every
// pointer is aligned to it times element_size. ChooseVecWidth(e, h, s, p) equals
// NarrowVecWidthToPointers(ChooseVecWidth(e, h, s, {}), e, p): a repeat call of a layout seen
// before (PlanMemo) keeps the first part and reruns only this one.
int NarrowVecWidthToPointers(int vec, size_t element_size, std::initializer_list<const void*> pointers);

}  // namespace kiln::client
