#include "client/ops/vec_width.h"

namespace kiln::client {

namespace {

// x % m == 0 for a power of two m, without a division: an op call runs this a dozen times, and
// a 64-bit division costs tens of cycles (docs/benchmarking.md, the op-call overhead).
bool MultipleOf(uint64_t x, uint64_t power_of_two) { return (x & (power_of_two - 1)) == 0; }

}  // namespace

int ChooseVecWidth(size_t element_size, int64_t hidden, std::initializer_list<int64_t> row_strides,
                   std::initializer_list<const void*> pointers) {
  // Element sizes are powers of two (1, 2, 4, 8); anything else keeps scalar accesses.
  const bool power_of_two = element_size != 0 && (element_size & (element_size - 1)) == 0;
  if (!power_of_two || element_size > kMaxVectorBytes) return 1;
  for (uint64_t vec = kMaxVectorBytes / element_size; vec > 1; vec /= 2) {
    // Two's complement: a negative multiple of vec has the same low bits as a positive one.
    bool fits = MultipleOf(static_cast<uint64_t>(hidden), vec);
    for (int64_t stride : row_strides) fits = fits && MultipleOf(static_cast<uint64_t>(stride), vec);
    const uint64_t bytes = vec * element_size;
    for (const void* p : pointers) fits = fits && MultipleOf(reinterpret_cast<uintptr_t>(p), bytes);
    if (fits) return static_cast<int>(vec);
  }
  return 1;
}

int NarrowVecWidthToPointers(int vec, size_t element_size, std::initializer_list<const void*> pointers) {
  uintptr_t address_bits = 0;  // a power-of-two alignment every pointer has is one their OR has
  for (const void* p : pointers) address_bits |= reinterpret_cast<uintptr_t>(p);
  while (vec > 1 && (address_bits & (static_cast<uintptr_t>(vec) * element_size - 1)) != 0) vec /= 2;
  return vec;
}

}  // namespace kiln::client
