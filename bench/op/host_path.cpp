// kiln-host-path: calls an op N times on fake device pointers, or loads a module N times, for
// counting the instructions Kiln's host path runs per call (bench/op/host_path.sh runs it under
// callgrind with the no-op driver of null_cuda_driver.cpp; docs/benchmarking.md). The op shapes
// are kiln-bench --overhead's: silu_and_mul bf16 1 x 8, rms_norm bf16 1 x 128; apply_rope is one
// decode token of Llama-3.1-8B (q [1, 32, 128], k [1, 8, 128] bf16, int64 positions); load_source is
// kiln-bench-service's warm fetch: a 40-kernel source (a ~100 KB sm_90a cubin) fetched,
// verified and loaded each time (reuse_loaded off), the last 16 modules kept loaded.
// gemm, gemm_m8 and gemm_m24 are Llama-3.1-8B's qkv projection at one, eight and 24 tokens (bf16
// [M, 4096] x [6144, 4096]): gemm's small-M kernels (kiln/gemm/gemv.cuh), fp32 FMAs, mma.sync and
// (with KILN_GEMM_GEMV_WIDE=1) its wide form. fp8_gemm is the same projection at one token on
// block-scaled e4m3 (a [1, 4096], b [6144, 4096], scales per 128): fp8_gemm's small-M GEMV kernel
// (kiln/gemm/fp8_gemv.cuh; with KILN_FP8_GEMM_GEMV=0 the tile kernel's split-K clusters, which the
// no-op driver's occupancy query refuses); fp8_gemm_m16 at 16 rows, its wide entry.
// fused_moe is Qwen3-30B-A3B's expert layer at one token (E 128, top-8, H 2048, I 768): the
// decode path's GEMVs and the combine (two launches with KILN_FUSED_MOE_FOLD=1). fused_moe_fp8 is
// the same layer on block-scaled fp8 experts: with KILN_FUSED_MOE_PATH=gemv its decode path's five
// launches (x quantized, the two fp8 GEMVs with the silu-and-quantize between, the combine), with
// =grouped its grouped path's six (unset: the decode path, the default at one token).
//   kiln-host-path OP CALLS
// OP: silu_and_mul, rms_norm, apply_rope, gemm, gemm_m8, gemm_m24, fp8_gemm, fp8_gemm_m16,
// fused_moe, fused_moe_fp8 or load_source.
// Exit status 0 when every call returned OK, 1 otherwise (the first error on stderr), 2 on bad
// usage.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <string>

#include "bench/service/large_source.h"
#include "kiln/kernel.h"
#include "kiln/ops/activation.h"
#include "kiln/ops/gemm.h"
#include "kiln/ops/moe.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/rope.h"

int main(int argc, char** argv) {
  char* end = nullptr;
  const long calls = argc == 3 ? std::strtol(argv[2], &end, 10) : -1;
  const bool silu = argc == 3 && std::strcmp(argv[1], "silu_and_mul") == 0;
  const bool rms = argc == 3 && std::strcmp(argv[1], "rms_norm") == 0;
  const bool rope = argc == 3 && std::strcmp(argv[1], "apply_rope") == 0;
  const bool load = argc == 3 && std::strcmp(argv[1], "load_source") == 0;
  const bool gemm1 = argc == 3 && std::strcmp(argv[1], "gemm") == 0;
  const bool gemm8 = argc == 3 && std::strcmp(argv[1], "gemm_m8") == 0;
  const bool gemm24 = argc == 3 && std::strcmp(argv[1], "gemm_m24") == 0;
  const bool fp8_gemm1 = argc == 3 && std::strcmp(argv[1], "fp8_gemm") == 0;
  const bool fp8_gemm16 = argc == 3 && std::strcmp(argv[1], "fp8_gemm_m16") == 0;
  const bool fp8_gemm = fp8_gemm1 || fp8_gemm16;
  const bool moe = argc == 3 && std::strcmp(argv[1], "fused_moe") == 0;
  const bool moe_fp8 = argc == 3 && std::strcmp(argv[1], "fused_moe_fp8") == 0;
  if ((!silu && !rms && !rope && !load && !gemm1 && !gemm8 && !gemm24 && !fp8_gemm && !moe && !moe_fp8) ||
      end == argv[2] || *end != '\0' || calls < 0) {
    std::fprintf(stderr, "usage: kiln-host-path "
                         "silu_and_mul|rms_norm|apply_rope|gemm|gemm_m8|gemm_m24|fp8_gemm|fp8_gemm_m16|fused_moe|fused_"
                         "moe_fp8|load_source CALLS\n");
    return 2;
  }
  if (load) {
    kiln::SourceRequest source{"bench_large", kiln::bench::LargeSource(40), {}, {}, {}};
    for (int k = 0; k < 40; ++k) source.entries.push_back("bench_k" + std::to_string(k));
    kiln::LoadOptions fresh;
    fresh.reuse_loaded = false;  // every call: fetch + verify + load
    std::deque<kiln::Module> held;
    for (long i = 0; i <= calls; ++i) {
      auto module = kiln::LoadSource(source, fresh);
      if (!module.ok()) {
        std::fprintf(stderr, "kiln-host-path: load %ld: %s\n", i, module.status().ToString().c_str());
        return 1;
      }
      held.push_back(*module);
      if (held.size() > 16) held.pop_front();
    }
    return 0;
  }
  // Contiguous bf16 tensors on cuda:0 at made-up addresses (the no-op driver never reads them).
  auto fake = [](uintptr_t address, std::initializer_list<int64_t> shape) {
    return kiln::TensorView::Contiguous(reinterpret_cast<void*>(address), kiln::DType::kBFloat16, shape);
  };
  const kiln::TensorView out = fake(0x7f0000000000, {1, silu ? 8 : 128});
  const kiln::TensorView input = fake(0x7f1000000000, {1, silu ? 16 : 128});
  const kiln::TensorView weight = fake(0x7f2000000000, {128});
  const kiln::TensorView q = fake(0x7f3000000000, {1, 32, 128});
  const kiln::TensorView k = fake(0x7f4000000000, {1, 8, 128});
  const kiln::TensorView positions = kiln::TensorView::Contiguous(reinterpret_cast<void*>(0x7f5000000000),
                                                                  kiln::DType::kInt64, {1});
  const kiln::ops::RopeOptions rope_options;  // rotary_dim = head_dim, NeoX pairs, theta 10000
  const int64_t gemm_m = gemm24 ? 24 : gemm8 ? 8 : 1;
  const kiln::TensorView gemm_a = fake(0x7f6000000000, {gemm_m, 4096});
  const kiln::TensorView gemm_b = fake(0x7f7000000000, {6144, 4096});
  const kiln::TensorView gemm_d = fake(0x7f8000000000, {gemm_m, 6144});
  const kiln::TensorView moe_x = fake(0x7f9000000000, {1, 2048});
  const kiln::TensorView moe_w13 = fake(0x7fa000000000, {128, 1536, 2048});
  const kiln::TensorView moe_w2 = fake(0x7fb000000000, {128, 2048, 768});
  const kiln::TensorView moe_out = fake(0x7fc000000000, {1, 2048});
  const kiln::TensorView moe_ids = kiln::TensorView::Contiguous(reinterpret_cast<void*>(0x7fd000000000),
                                                                kiln::DType::kInt32, {1, 8});
  const kiln::TensorView moe_weights = kiln::TensorView::Contiguous(reinterpret_cast<void*>(0x7fd100000000),
                                                                    kiln::DType::kFloat32, {1, 8});
  const kiln::TensorView moe_workspace = kiln::TensorView::Contiguous(
      reinterpret_cast<void*>(0x7fe000000000), kiln::DType::kUInt8,
      {kiln::ops::fused_moe_workspace_bytes(1, 8, 128, 2048, 768)});
  // fused_moe_fp8's weights (e4m3), their block scales and its workspace.
  auto typed = [](uintptr_t address, kiln::DType dtype, std::initializer_list<int64_t> shape) {
    return kiln::TensorView::Contiguous(reinterpret_cast<void*>(address), dtype, shape);
  };
  const kiln::TensorView fp8_w13 = typed(0x7fa000000000, kiln::DType::kFloat8E4M3, {128, 1536, 2048});
  const kiln::TensorView fp8_w13_scales = typed(0x7fa800000000, kiln::DType::kFloat32, {128, 12, 16});
  const kiln::TensorView fp8_w2 = typed(0x7fb000000000, kiln::DType::kFloat8E4M3, {128, 2048, 768});
  const kiln::TensorView fp8_w2_scales = typed(0x7fb800000000, kiln::DType::kFloat32, {128, 16, 6});
  const kiln::TensorView fp8_workspace = typed(0x7fe000000000, kiln::DType::kUInt8,
                                               {kiln::ops::fused_moe_fp8_workspace_bytes(1, 8, 128, 2048, 768)});
  // fp8_gemm's operands: Llama-3.1-8B's qkv projection at one token (16 for fp8_gemm_m16).
  const int64_t fp8_m = fp8_gemm16 ? 16 : 1;
  const kiln::TensorView fp8_a = typed(0x7f6000000000, kiln::DType::kFloat8E4M3, {fp8_m, 4096});
  const kiln::TensorView fp8_b = typed(0x7f7000000000, kiln::DType::kFloat8E4M3, {6144, 4096});
  const kiln::TensorView fp8_a_scales = typed(0x7f7800000000, kiln::DType::kFloat32, {fp8_m, 32});
  const kiln::TensorView fp8_b_scales = typed(0x7f7900000000, kiln::DType::kFloat32, {48, 32});
  const kiln::TensorView fp8_d = fake(0x7f8000000000, {fp8_m, 6144});
  // The first call fetches and loads the module (not what is counted: the script subtracts a
  // run of 0 calls, which makes this one too).
  for (long i = 0; i <= calls; ++i) {
    const kiln::Status s =
        silu                         ? kiln::ops::silu_and_mul(out, input, nullptr)
        : rms                        ? kiln::ops::rms_norm(out, input, weight, 1e-6, nullptr)
        : (gemm1 || gemm8 || gemm24) ? kiln::ops::gemm(gemm_d, gemm_a, gemm_b, nullptr, nullptr, 1.0, nullptr)
        : fp8_gemm                   ? kiln::ops::fp8_gemm(fp8_d, fp8_a, fp8_b, fp8_a_scales, fp8_b_scales, nullptr)
        : moe     ? kiln::ops::fused_moe(moe_out, moe_x, moe_w13, moe_w2, moe_ids, moe_weights, moe_workspace, nullptr)
        : moe_fp8 ? kiln::ops::fused_moe_fp8(moe_out, moe_x, fp8_w13, fp8_w13_scales, fp8_w2, fp8_w2_scales, moe_ids,
                                             moe_weights, fp8_workspace, nullptr)
                  : kiln::ops::apply_rope(q, k, positions, rope_options, nullptr);
    if (!s.ok()) {
      std::fprintf(stderr, "kiln-host-path: call %ld: %s\n", i, s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
