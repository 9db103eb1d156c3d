// A raw CUDA source whose sm_90a cubin is about the size asked for (the service benchmark
// measures fetch + verify + load of a ~100 KB cubin, a realistic size for a fused kernel).
#pragma once

#include <string>

namespace kiln::bench {

// `kernels` extern "C" kernels (bench_k0 ...), each an unrolled polynomial chain; about
// 2.4 KB of sm_90a cubin per kernel.
std::string LargeSource(int kernels);

}  // namespace kiln::bench
