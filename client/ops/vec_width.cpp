#include "client/ops/vec_width.h"

namespace kiln::client {

int ChooseVecWidth(size_t element_size, int64_t hidden, std::initializer_list<int64_t> row_strides,
                   std::initializer_list<const void*> pointers) {
  if (element_size == 0 || element_size > kMaxVectorBytes) return 1;
  for (int64_t vec = static_cast<int64_t>(kMaxVectorBytes / element_size); vec > 1; vec /= 2) {
    bool fits = hidden % vec == 0;
    for (int64_t stride : row_strides) fits = fits && stride % vec == 0;
    const uintptr_t bytes = static_cast<uintptr_t>(vec) * element_size;
    for (const void* p : pointers) fits = fits && reinterpret_cast<uintptr_t>(p) % bytes == 0;
    if (fits) return static_cast<int>(vec);
  }
  return 1;
}

}  // namespace kiln::client
