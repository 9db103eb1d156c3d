#include "bench/service/large_source.h"

#include <sstream>

namespace kiln::bench {

std::string LargeSource(int kernels) {
  std::ostringstream s;
  s << "template <int K>\n"
       "__device__ __forceinline__ float chain(float x) {\n"
       "  float y = x;\n"
       "#pragma unroll\n"
       "  for (int i = 0; i < 48; ++i) y = fmaf(y, 1.0001f + K * 1e-6f, 0.5f * (i + K));\n"
       "  return y;\n"
       "}\n";
  for (int k = 0; k < kernels; ++k)
    s << "extern \"C\" __global__ void bench_k" << k << "(float* x, int n) {\n"
      << "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      << "  if (i < n) x[i] = chain<" << k << ">(x[i]);\n"
      << "}\n";
  return s.str();
}

}  // namespace kiln::bench
