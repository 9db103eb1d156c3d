#include "server/jit/nvrtc_compiler.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "kernels/jit/op_generator.h"
#include "kernels/jit/raw_source.h"
#include "tests/support/temp_dir.h"

namespace kiln::server {
namespace {

using kernels::GpuArch;
using kernels::JitSpec;
using kernels::SourceFile;

constexpr const char* kCuda = KILN_TEST_CUDA_INCLUDE_DIR;

std::shared_ptr<const kernels::TreeSnapshot> Tree() {
  static std::shared_ptr<const kernels::TreeSnapshot> snapshot = [] {
    auto tree = kernels::KernelTree::Open(KILN_TEST_KERNELS_DIR);
    REQUIRE(tree.ok());
    return (*tree)->Current();
  }();
  return snapshot;
}

GpuArch Arch(const char* text) {
  auto arch = GpuArch::Parse(text);
  REQUIRE(arch.ok());
  return *arch;
}

const NvrtcCompiler& Compiler() {
  static NvrtcCompiler compiler(CompilerOptions{kCuda, ""});
  return compiler;
}

JitSpec RawSpec(std::vector<std::pair<std::string, std::string>> units, std::vector<std::string> entries) {
  JitSpec spec;
  spec.op = "source";
  spec.uri = "src_test_000000000000";
  for (auto& [name, code] : units) spec.units.push_back({name, code, SourceFile::Origin::kRequest, ""});
  spec.entries = std::move(entries);
  return spec;
}

// Text of a std::string, std::string_view or absl::string_view (Debian's abseil has its own).
template <typename Text>
bool Contains(const Text& text, std::string_view part) {
  return std::string_view(text.data(), text.size()).find(part) != std::string_view::npos;
}

TEST_CASE("a raw source including CUDA and kiln headers compiles to a cubin", "[compiler]") {
  kernels::RawSource source;
  source.name = "halves";
  source.code = R"(#include <cuda_fp16.h>
#include "kiln/common/vec.cuh"
#include <kiln/common/numeric.cuh>
extern "C" __global__ void __launch_bounds__(128) scale(__half* x, float s) {
  kiln::Vec<__half, 8> v = kiln::LoadVec<8>(x + threadIdx.x * 8);
  for (int i = 0; i < 8; ++i) v.v[i] = kiln::FromFloat<__half>(kiln::ToFloat(v.v[i]) * s);
  kiln::StoreVec<8>(x + threadIdx.x * 8, v);
}
extern "C" __global__ void zero(float* x) { x[threadIdx.x] = 0.0f; }
)";
  source.entries = {"scale", "zero"};
  auto spec = kernels::SpecFromRawSource(source, *Tree(), kCuda);
  REQUIRE(spec.ok());
  for (const char* arch : {"sm_80", "sm_90a"}) {
    auto result = Compiler().Compile(CompileRequest{&*spec, Tree().get(), Arch(arch), {}, false, "/gen/x"});
    INFO(arch << ": " << result.status().ToString());
    REQUIRE(result.ok());
    CHECK(result->cubin.starts_with("\x7f"
                                    "ELF"));
    CHECK(result->compile_ms > 0);
    CHECK(result->link_ms == 0);
    REQUIRE(result->kernels.size() == 2);
    CHECK(result->kernels[0].name == "scale");
    CHECK(result->kernels[0].max_threads_per_block == 128);  // capped by __launch_bounds__
    CHECK(result->kernels[0].registers > 0);
    CHECK(result->kernels[0].const_bytes > 0);
    CHECK(result->kernels[1].name == "zero");
    CHECK(result->kernels[1].max_threads_per_block == 1024);
  }
}

TEST_CASE("CCCL headers from the CUDA include folder compile too", "[compiler]") {
  kernels::RawSource source;
  source.name = "cccl";
  source.code = "#include <cuda/std/cstdint>\nextern \"C\" __global__ void k(cuda::std::uint32_t* p) { p[0] = 1; }\n";
  source.entries = {"k"};
  auto spec = kernels::SpecFromRawSource(source, *Tree(), kCuda);
  REQUIRE(spec.ok());
  auto result = Compiler().Compile(CompileRequest{&*spec, Tree().get(), Arch("sm_90a"), {}, false, ""});
  INFO(result.status().ToString());
  CHECK(result.ok());
}

TEST_CASE("the LTO path links two units where one calls the other's device function", "[compiler]") {
  JitSpec spec = RawSpec({{"main.cu", R"(extern "C" __device__ float twice(float x);
extern "C" __global__ void __launch_bounds__(64) apply(float* p) { p[threadIdx.x] = twice(p[threadIdx.x]); }
)"},
                          {"helper.cu", "extern \"C\" __device__ float twice(float x) { return 2.0f * x; }\n"}},
                         {"apply"});
  CHECK(NvrtcCompiler::UsesLinkPath(spec));
  for (const char* arch : {"sm_80", "sm_90a"}) {
    auto result = Compiler().Compile(CompileRequest{&spec, nullptr, Arch(arch), {}, true, ""});
    INFO(arch << ": " << result.status().ToString());
    REQUIRE(result.ok());
    CHECK(result->cubin.starts_with("\x7f"
                                    "ELF"));
    CHECK(result->link_ms > 0);
    REQUIRE(result->kernels.size() == 1);
    CHECK(result->kernels[0].name == "apply");
    CHECK(result->kernels[0].registers > 0);
    CHECK(result->kernels[0].max_threads_per_block == 64);
    // verbose_log keeps ptxas' report, which nvJitLink gave for the linked kernel.
    CHECK(Contains(result->log, "Compiling entry function 'apply'"));
  }
  // One unit with spec.link takes the LTO path too.
  JitSpec single = RawSpec({{"one.cu", "extern \"C\" __global__ void k(float* p) { p[0] = 1; }\n"}}, {"k"});
  single.link = true;
  auto result = Compiler().Compile(CompileRequest{&single, nullptr, Arch("sm_90a"), {}, false, ""});
  REQUIRE(result.ok());
  CHECK(result->link_ms > 0);
  CHECK(!Contains(result->log, "ptxas info"));
}

TEST_CASE("a compile error of a raw source is INVALID_ARGUMENT with the log attached", "[compiler]") {
  JitSpec spec = RawSpec({{"bad.cu", "extern \"C\" __global__ void k(float* p) {\n  p[0] = undefined_name;\n}\n"}},
                         {"k"});
  auto result = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, false, "/tmp/gen/src_test"});
  REQUIRE(!result.ok());
  CHECK(result.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string message(result.status().message());
  INFO(message);
  CHECK(Contains(message, "src_test_000000000000"));
  CHECK(Contains(message, "sm_90a"));
  CHECK(Contains(message, "/tmp/gen/src_test"));
  CHECK(Contains(message, "bad.cu(2): error"));
  CHECK(Contains(message, "undefined_name"));
  auto log = CompileLog(result.status());
  REQUIRE(log.has_value());
  CHECK(Contains(*log, "bad.cu(2): error"));
  CHECK(!CompileLog(absl::InternalError("no log")).has_value());
}

TEST_CASE("a compile error of a library op is FAILED_PRECONDITION", "[compiler]") {
  JitSpec spec = RawSpec({{"rmsnorm.cu", "#include \"kiln_config.cuh\"\nint x = KILN_MISSING;\n"}}, {"kiln_rmsnorm"});
  spec.op = "rmsnorm";
  spec.uri = "rmsnorm_bf16_h4096";
  spec.headers.push_back({"kiln_config.cuh", "#pragma once\n", SourceFile::Origin::kGenerated, ""});
  auto result = Compiler().Compile(
      CompileRequest{&spec, Tree().get(), Arch("sm_80"), {}, false, "/gen/rmsnorm_bf16_h4096"});
  REQUIRE(!result.ok());
  CHECK(result.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(result.status().message(), "KILN_MISSING"));
  CHECK(Contains(result.status().message(), "/gen/rmsnorm_bf16_h4096"));
  CHECK(CompileLog(result.status()).has_value());
}

TEST_CASE("a link error names nvJitLink and carries its log", "[compiler]") {
  JitSpec spec = RawSpec({{"main.cu", "extern \"C\" __device__ float missing(float);\n"
                                      "extern \"C\" __global__ void k(float* p) { p[0] = missing(p[0]); }\n"},
                          {"other.cu", "extern \"C\" __device__ float present(float x) { return x; }\n"}},
                         {"k"});
  auto result = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, false, ""});
  REQUIRE(!result.ok());
  CHECK(result.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(result.status().message(), "nvJitLink"));
  auto log = CompileLog(result.status());
  REQUIRE(log.has_value());
  CHECK(Contains(*log, "missing"));
}

TEST_CASE("an entry that is not a kernel of the cubin is refused, listing the kernels", "[compiler]") {
  JitSpec spec = RawSpec({{"k.cu", "__global__ void mangled(float* p) { p[0] = 1; }\n"
                                   "extern \"C\" __global__ void plain(float* p) { p[0] = 2; }\n"}},
                         {"plain", "mangled"});
  auto result = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, false, ""});
  REQUIRE(!result.ok());
  CHECK(result.status().code() == absl::StatusCode::kInvalidArgument);
  auto log = CompileLog(result.status());
  REQUIRE(log.has_value());
  CHECK(Contains(*log, "entry mangled is not a kernel"));
  CHECK(Contains(*log, "plain"));
  CHECK(Contains(*log, "_Z7mangledPf"));
  CHECK(Contains(*log, "extern \"C\""));
}

TEST_CASE("verbose_log decides whether ptxas' report stays in the log", "[compiler]") {
  JitSpec spec = RawSpec(
      {{"k.cu", "#warning \"a warning stays\"\nextern \"C\" __global__ void k(float* p) { p[0] = 1; }\n"}}, {"k"});
  auto quiet = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, false, ""});
  auto verbose = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, true, ""});
  REQUIRE(quiet.ok());
  REQUIRE(verbose.ok());
  CHECK(!Contains(quiet->log, "ptxas"));
  CHECK(Contains(quiet->log, "a warning stays"));
  CHECK(Contains(verbose->log, "ptxas info    : Used"));
  CHECK(Contains(verbose->log, "a warning stays"));
  CHECK(quiet->kernels.size() == 1);
  CHECK(quiet->cubin == verbose->cubin);
}

TEST_CASE("bad requests are refused before NVRTC runs", "[compiler]") {
  CHECK(Compiler().Compile(CompileRequest{}).status().code() == absl::StatusCode::kInvalidArgument);
  JitSpec empty = RawSpec({}, {"k"});
  CHECK(Compiler().Compile(CompileRequest{&empty, nullptr, Arch("sm_90a"), {}, false, ""}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  JitSpec spec = RawSpec({{"k.cu", "extern \"C\" __global__ void k() {}\n"}}, {"k"});
  CHECK(Compiler().Compile(CompileRequest{&spec, nullptr, GpuArch{}, {}, false, ""}).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("CompilePtx gives each unit's PTX for the arch's virtual target, and refuses what Compile refuses",
          "[compiler]") {
  JitSpec spec = RawSpec({{"main.cu", R"(extern "C" __device__ float twice(float x);
extern "C" __global__ void apply(float* p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  p[threadIdx.x] = twice(p[threadIdx.x]);
}
)"},
                          {"helper.cu", "extern \"C\" __device__ float twice(float x) { return 2.0f * x; }\n"}},
                         {"apply"});
  auto ptx = Compiler().CompilePtx(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, false, ""});
  INFO(ptx.status().ToString());
  REQUIRE(ptx.ok());
  REQUIRE(ptx->size() == 2);  // one a unit, separately compiled (the other's function is extern)
  CHECK(Contains((*ptx)[0], ".target sm_90a"));
  CHECK(Contains((*ptx)[0], ".entry apply("));
  CHECK(Contains((*ptx)[0], "griddepcontrol.wait;"));
  CHECK(Contains((*ptx)[1], "twice("));
  CHECK_FALSE(Contains((*ptx)[1], ".entry"));
  CHECK((*ptx)[0].find('\0') == std::string::npos);

  JitSpec bad = RawSpec({{"bad.cu", "extern \"C\" __global__ void k() { undefined_name(); }\n"}}, {"k"});
  auto refused = Compiler().CompilePtx(CompileRequest{&bad, nullptr, Arch("sm_90a"), {}, false, ""});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(CompileLog(refused.status()).value_or(""), "undefined_name"));
  CHECK(Compiler().CompilePtx(CompileRequest{}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("KeyOptions: the spec's options then the extra ones, never paths or PCH", "[compiler]") {
  JitSpec spec = RawSpec({{"k.cu", "extern \"C\" __global__ void k() {}\n"}}, {"k"});
  spec.nvrtc_options = {"-std=c++17", "-DX=1"};
  CompileRequest request{&spec, nullptr, Arch("sm_90a"), {"-lineinfo"}, false, ""};
  CHECK(NvrtcCompiler::KeyOptions(request) == std::vector<std::string>{"-std=c++17", "-DX=1", "-lineinfo"});
  spec.link = true;
  CHECK(NvrtcCompiler::KeyOptions(request) == std::vector<std::string>{"-std=c++17", "-DX=1", "-lineinfo", "-dlto"});
  // The options change the output: -lineinfo adds line tables.
  spec.link = false;
  auto plain = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, false, ""});
  auto lines = Compiler().Compile(request);
  REQUIRE(plain.ok());
  REQUIRE(lines.ok());
  CHECK(plain->cubin != lines->cubin);
  // -G works on both paths.
  auto debug = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {"-G"}, false, ""});
  CHECK(debug.ok());
  spec.link = true;
  auto debug_lto = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {"-G"}, false, ""});
  INFO(debug_lto.status().ToString());
  CHECK(debug_lto.ok());
}

kernels::JitSpec RmsNormSpec(const char* dtype, int hidden) {
  auto spec = kernels::OpRegistry::Builtin().Generate("rmsnorm", {{"dtype", dtype}, {"hidden", std::to_string(hidden)}},
                                                      *Tree());
  REQUIRE(spec.ok());
  return *spec;
}

TEST_CASE("two threads compiling at once, with and without PCH, give identical cubins", "[compiler][pch]") {
  testing::TempDir pch("kiln-pch");
  const NvrtcCompiler with_pch(CompilerOptions{kCuda, pch.path()});
  std::vector<JitSpec> specs;
  for (const char* dtype : {"fp32", "fp16", "bf16"}) {
    for (int hidden : {1024, 4096, 5120}) specs.push_back(RmsNormSpec(dtype, hidden));
  }
  std::vector<std::string> reference;
  for (const JitSpec& spec : specs) {
    auto result = Compiler().Compile(CompileRequest{&spec, Tree().get(), Arch("sm_90a"), {}, false, ""});
    REQUIRE(result.ok());
    reference.push_back(result->cubin);
  }
  for (int round = 0; round < 2; ++round) {
    std::atomic<int> failures{0}, mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = t; i < specs.size() * 2; i += 2) {
          const size_t s = i % specs.size();
          auto result = with_pch.Compile(CompileRequest{&specs[s], Tree().get(), Arch("sm_90a"), {}, false, ""});
          if (!result.ok()) {
            ++failures;
            std::fprintf(stderr, "PCH compile failed: %s\n", result.status().ToString().c_str());
          } else if (result->cubin != reference[s]) {
            ++mismatches;
          }
        }
      });
    }
    for (auto& thread : threads) thread.join();
    INFO("round " << round);
    CHECK(failures == 0);
    CHECK(mismatches == 0);
  }
}

// NVRTC reuses a PCH without comparing in-memory header contents; the compiler must keep a
// compile from getting a PCH built from other headers (pch_key.h).
TEST_CASE("PCH never serves one spec header's contents to another compile", "[compiler][pch]") {
  testing::TempDir pch("kiln-pch");
  const NvrtcCompiler with_pch(CompilerOptions{kCuda, pch.path()});
  auto spec_with = [](int value) {
    JitSpec spec = RawSpec({{"u.cu", "#include \"cfg.h\"\n#include <cuda_fp16.h>\n"
                                     "extern \"C\" __global__ void k(int* p) { p[0] = CFG_VALUE; }\n"}},
                           {"k"});
    spec.headers.push_back(
        {"cfg.h", "#define CFG_VALUE " + std::to_string(value) + "\n", SourceFile::Origin::kGenerated, ""});
    return spec;
  };
  for (int value : {10, 20, 30, 10}) {
    JitSpec spec = spec_with(value);
    auto reference = Compiler().Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, false, ""});
    auto cached = with_pch.Compile(CompileRequest{&spec, nullptr, Arch("sm_90a"), {}, false, ""});
    REQUIRE(reference.ok());
    REQUIRE(cached.ok());
    INFO("CFG_VALUE " << value);
    CHECK(cached->cubin == reference->cubin);
  }
  // Nor a kernels-tree header edited between two compiles.
  kernels::TreeSnapshot tree = *Tree();
  JitSpec spec = RawSpec(
      {{"t.cu", "#include \"kiln/extra.cuh\"\nextern \"C\" __global__ void k(int* p) { p[0] = EXTRA; }\n"}}, {"k"});
  for (int value : {1, 2, 3}) {
    tree.files["include/kiln/extra.cuh"] = "#define EXTRA " + std::to_string(value) + "\n";
    tree.digest = "digest " + std::to_string(value);  // what KernelTree would compute anew
    auto reference = Compiler().Compile(CompileRequest{&spec, &tree, Arch("sm_90a"), {}, false, ""});
    auto cached = with_pch.Compile(CompileRequest{&spec, &tree, Arch("sm_90a"), {}, false, ""});
    REQUIRE(reference.ok());
    REQUIRE(cached.ok());
    INFO("EXTRA " << value);
    CHECK(cached->cubin == reference->cubin);
  }
}

// Not a test: how much PCH saves on this machine (run with "[.bench]"; times vary).
TEST_CASE("PCH timing over rmsnorm specializations", "[.bench]") {
  testing::TempDir pch("kiln-pch");
  const NvrtcCompiler with_pch(CompilerOptions{kCuda, pch.path()});
  for (const NvrtcCompiler* compiler : {&Compiler(), &with_pch}) {
    double total = 0;
    int n = 0;
    for (const char* dtype : {"fp32", "fp16", "bf16"}) {
      for (int hidden : {1024, 2048, 4096, 5120, 8192}) {
        JitSpec spec = RmsNormSpec(dtype, hidden);
        auto result = compiler->Compile(CompileRequest{&spec, Tree().get(), Arch("sm_90a"), {}, false, ""});
        REQUIRE(result.ok());
        if (n > 0) total += result->compile_ms;  // the first one creates the PCH
        ++n;
      }
    }
    std::printf("%s: mean %.1f ms per compile over %d compiles (the first left out)\n",
                compiler == &with_pch ? "with PCH" : "without PCH", total / (n - 1), n - 1);
  }
}

}  // namespace
}  // namespace kiln::server
