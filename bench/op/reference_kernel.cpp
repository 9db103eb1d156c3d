#include "bench/op/reference_kernel.h"

namespace kiln::bench {

const char* CudaTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float";
    case DType::kFloat16: return "__half";
    case DType::kBFloat16: return "__nv_bfloat16";
    case DType::kInt8: return "signed char";
    case DType::kUInt8: return "unsigned char";
    case DType::kInt32: return "int";
    case DType::kInt64: return "long long";
    case DType::kFloat8E4M3: return "__nv_fp8_e4m3";
  }
  return "void";
}

const std::string& ReferencePrelude() {
  static const std::string kPrelude = R"(// kiln-bench reference prelude
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef KILN_REF_T T;

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToF(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename U> __device__ __forceinline__ U FromF(float x);
template <> __device__ __forceinline__ float FromF<float>(float x) { return x; }
template <> __device__ __forceinline__ __half FromF<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
// An fp8 e4m3 byte (OCP e4m3fn: bias 7, no infinities, S.1111.111 the NaN), decoded by hand so
// that no reference depends on an fp8 header.
__device__ __forceinline__ float E4M3ToF(unsigned char x) {
  const int e = (x >> 3) & 15, m = x & 7;
  float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
  if (e == 15 && m == 7) v = __int_as_float(0x7fc00000);
  return (x & 0x80) ? -v : v;
}

)";
  return kPrelude;
}

StatusOr<Kernel> LoadReferenceKernel(const std::string& name, const std::string& source, const std::string& entry,
                                     DType dtype) {
  SourceRequest request;
  request.name = name + "_" + DTypeName(dtype);
  request.code = ReferencePrelude() + source;
  request.entries = {entry};
  request.options = {std::string("-DKILN_REF_T=") + CudaTypeName(dtype)};
  auto module = LoadSource(request);
  if (!module.ok()) return module.status().WithContext("reference kernel " + request.name);
  return module->kernel(entry);
}

}  // namespace kiln::bench
