// Moving a tensor view's elements between its memory (GPU, pinned, managed or plain host) and
// a dense row-major host buffer: what a dump writes and what replay uploads. A strided view
// is copied as the span of memory that covers it, then gathered (or scattered) on the host,
// so one copy serves any layout.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client::diag {

// Element offsets [begin, end) that the view touches (strides may be any sign); {0, 0} when
// the view has no elements.
struct ElementSpan {
  int64_t begin = 0;
  int64_t end = 0;
};
ElementSpan CoveringSpan(const TensorView& t);

// Whether the memory of `device` is read with a driver copy (GPU and managed memory) rather
// than directly (host and pinned host memory).
bool NeedsDriverCopy(const Device& device);

// The elements of `t` in row-major order (numel × element size bytes). GPU memory is copied
// with cuMemcpyDtoHAsync on `stream` and waited for; the caller has already synchronized the
// stream's earlier work. Needs the tensor's context current.
StatusOr<std::vector<uint8_t>> ReadTensor(const TensorView& t, void* stream);

// Dense row-major `values` of `t`'s shape placed at `t`'s strides in `span`, a host image of
// CoveringSpan(t) (element `span_begin` first). Elements outside the view keep their bytes.
void ScatterInto(const TensorView& t, const std::vector<uint8_t>& values, int64_t span_begin,
                 std::vector<uint8_t>* span);
// The reverse: the view's elements gathered from such an image.
std::vector<uint8_t> GatherFrom(const TensorView& t, const uint8_t* span, int64_t span_begin);

}  // namespace kiln::client::diag
