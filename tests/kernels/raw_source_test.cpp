#include "kernels/jit/raw_source.h"

#include <catch2/catch.hpp>
#include <string>

#include "tests/support/temp_dir.h"

namespace kiln::kernels {
namespace {

constexpr const char* kCuda = KILN_TEST_CUDA_INCLUDE_DIR;

const TreeSnapshot& Tree() {
  static const TreeSnapshot tree = [] {
    TreeSnapshot t;
    t.root = "/kernels";
    t.files["include/kiln/common/vec.cuh"] = "// vec\n";
    t.files["include/kiln/norm/rmsnorm.cuh"] = "// rmsnorm\n";
    t.files["src/norm/rmsnorm.cu"] = "// unit\n";
    return t;
  }();
  return tree;
}

RawSource Source(std::string code = "extern \"C\" __global__ void k(float* p) { p[0] = 1; }\n") {
  RawSource source;
  source.name = "my_kernel";
  source.code = std::move(code);
  source.entries = {"k"};
  return source;
}

std::string Rejection(const RawSource& source) {
  auto spec = SpecFromRawSource(source, Tree(), kCuda);
  if (spec.ok()) return "<accepted>";
  CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("a raw source becomes a spec with a content-addressed URI", "[raw]") {
  RawSource source = Source();
  source.options = {"-DN=4", "--use_fast_math"};
  auto spec = SpecFromRawSource(source, Tree(), kCuda);
  REQUIRE(spec.ok());
  CHECK(spec->op == "source");
  REQUIRE(spec->uri.size() == std::string("src_my_kernel_").size() + 12);
  CHECK(spec->uri.starts_with("src_my_kernel_"));
  CHECK(spec->uri.substr(14).find_first_not_of("0123456789abcdef") == std::string::npos);
  REQUIRE(spec->units.size() == 1);
  CHECK(spec->units[0].name == "my_kernel.cu");
  CHECK(spec->units[0].content == source.code);
  CHECK(spec->units[0].origin == SourceFile::Origin::kRequest);
  CHECK(spec->headers.empty());
  CHECK(spec->nvrtc_options == source.options);
  CHECK(spec->entries == source.entries);
  REQUIRE(spec->arch_families.size() == 1);
  CHECK(spec->arch_families[0].min_cc == SupportedComputeCapabilities().front());
  CHECK(spec->arch_families[0].variant == '\0');

  // Deterministic, and every input changes it.
  CHECK(SpecFromRawSource(source, Tree(), kCuda)->uri == spec->uri);
  auto uri_with = [&](auto change) {
    RawSource changed = source;
    change(changed);
    auto s = SpecFromRawSource(changed, Tree(), kCuda);
    REQUIRE(s.ok());
    return s->uri;
  };
  CHECK(uri_with([](RawSource& s) { s.code += " "; }) != spec->uri);
  CHECK(uri_with([](RawSource& s) { s.options = {"-DN=5", "--use_fast_math"}; }) != spec->uri);
  CHECK(uri_with([](RawSource& s) { s.options = {"--use_fast_math", "-DN=4"}; }) != spec->uri);
  CHECK(uri_with([](RawSource& s) { s.entries = {"k", "k2"}; }) != spec->uri);
  CHECK(uri_with([](RawSource& s) { s.extra_units = {{"b.cu", "int x;"}}; }) != spec->uri);
  CHECK(uri_with([](RawSource& s) { s.name = "other"; }).starts_with("src_other_"));
}

TEST_CASE("every allowed option is accepted", "[raw]") {
  for (const char* option : {"-DFOO",
                             "-DFOO=1",
                             "-DFOO=a b",
                             "-D_X=(1+2)",
                             "-UFOO",
                             "--define-macro=X=1",
                             "--undefine-macro=X",
                             "-std=c++17",
                             "-std=c++20",
                             "--std=c++17",
                             "--use_fast_math",
                             "-use_fast_math",
                             "-ftz=true",
                             "-ftz=false",
                             "--ftz=true",
                             "-prec-div=false",
                             "-prec-sqrt=true",
                             "-fmad=false",
                             "--fmad=true",
                             "-maxrregcount=16",
                             "-maxrregcount=255",
                             "--maxrregcount=64",
                             "--extra-device-vectorization",
                             "-extra-device-vectorization",
                             "-default-device",
                             "--device-as-default-execution-space",
                             "-lineinfo",
                             "--generate-line-info"}) {
    RawSource source = Source();
    source.options = {option};
    INFO(option);
    CHECK(Rejection(source) == "<accepted>");
  }
}

TEST_CASE("each forbidden option is refused with its reason and the allow-list", "[raw]") {
  struct Case {
    std::string option;
    const char* reason;
  };
  for (const Case& c : {Case{"-I/etc", "include paths"},
                        Case{"--include-path=/x", "include paths"},
                        Case{"-include", "include paths"},
                        Case{"--pre-include=/etc/passwd", "pre-includes"},
                        Case{"--gpu-architecture=sm_90", "sets the target"},
                        Case{"-arch=sm_90", "sets the target"},
                        Case{"-G", "debug"},
                        Case{"--device-debug", "debug"},
                        Case{"-std=c++14", "dialect"},
                        Case{"-ftz=maybe", "true or false"},
                        Case{"-fmad", "allow-list"},
                        Case{"-maxrregcount=8", "16..255"},
                        Case{"-maxrregcount=x", "16..255"},
                        Case{"-D", "same option"},
                        Case{"-D1X", "not a macro name"},
                        Case{"-D=1", "not a macro name"},
                        Case{"-UX=1", "macro name only"},
                        Case{"-pch", "precompiled"},
                        Case{"--pch-dir=/tmp", "precompiled"},
                        Case{"--create-pch=/tmp/x", "precompiled"},
                        Case{"--default-device", "allow-list"},
                        Case{"--time=/tmp/t", "allow-list"},
                        Case{"-dlto", "allow-list"},
                        Case{"--fdevice-syntax-only", "allow-list"},
                        Case{"nodash", "start with '-'"},
                        Case{"-DN=1 -I/etc", "more than one option"},
                        Case{"-DN=1\t-I/etc", "more than one option"},
                        Case{"-lineinfo -G", "more than one option"},
                        Case{"-DX\nY", "control character"},
                        Case{std::string("-DX\0Y", 5), "control character"}}) {
    RawSource source = Source();
    source.options = {"-DOK", c.option};
    std::string message = Rejection(source);
    INFO(message);
    CHECK(Contains(message, "option '" + c.option + "'"));
    CHECK(Contains(message, c.reason));
    CHECK(Contains(message, "allowed: -D<macro>"));
  }
}

TEST_CASE("includes of the kernels include folder and of CUDA headers are accepted", "[raw]") {
  const std::string code = R"code(#include <cuda_fp16.h>
#include "cuda_bf16.h"
#include "kiln/common/vec.cuh"
#include <kiln/norm/rmsnorm.cuh>
  #  include   <crt/host_defines.h>   // spaces, and a comment after
#include "cuda/std/cstdint" /* block comment */
// #include </etc/passwd>           a comment is no directive
/* #include "../secret.h"
#include MACRO_IN_A_COMMENT */
const char* text = "#include </etc/passwd>";
const char* raw = R"x(
#include </etc/passwd>
)x";
#if __has_include(<cuda_fp8.h>) && __has_include("kiln/none.cuh")
#endif
#pragma once
#pragma nv_diag_suppress 177
extern "C" __global__ void k(float* p) { p[0] = 1; }
)code";
  CHECK(Rejection(Source(code)) == "<accepted>");
}

TEST_CASE("each forbidden include form is refused with unit, line and reason", "[raw]") {
  struct Case {
    std::string code;
    const char* reason;
    int line = 2;
  };
  for (const Case& c : {
           Case{"#include \"/etc/passwd\"\n", "absolute path"},
           Case{"#include </usr/local/cuda/include/cuda.h>\n", "absolute path"},
           Case{"#include \"../secret.h\"\n", "'..'"},
           Case{"#include <kiln/../../etc/passwd>\n", "'..'"},
           Case{"#include \"kiln\\\\common\\\\vec.cuh\"\n", "backslash"},
           Case{"#define H <cuda_fp16.h>\n#include H\n", "macro includes", 3},
           Case{"#include\n", "macro includes"},
           Case{"#include <nonexistent_header.h>\n", "names no file"},
           Case{"#include \"kiln/common/none.cuh\"\n", "names no file"},
           Case{"#include \"vec.cuh\"\n", "names no file"},  // not by path below include/
           Case{"#include \"src/norm/rmsnorm.cu\"\n", "names no file"},
           Case{"#include \"cuda_fp16.h\" extra\n", "followed by"},
           Case{"#include_next <cuda_fp16.h>\n", "#include_next"},
           Case{"#import \"x.h\"\n", "#import"},
           Case{"#embed \"/etc/passwd\"\n", "#embed"},
           Case{"#pragma include_alias(\"a.h\", \"/etc/passwd\")\n", "include_alias"},
           Case{"#pragma GCC dependency \"/etc/passwd\"\n", "GCC dependency"},
           Case{"_Pragma(\"GCC dependency \\\"/etc/passwd\\\"\")\n", "GCC dependency"},
           Case{"#if __has_include(\"/etc/passwd\")\n#endif\n", "absolute path"},
           Case{"#if __has_include(MACRO)\n#endif\n", "literal header"},
           Case{"#if __has_include_next(<cuda.h>)\n#endif\n", "__has_include_next"},
           Case{"#include \\\n \"/etc/passwd\"\n", "absolute path"},  // a line splice
           Case{"/* a comment\n */ #include \"/etc/passwd\"\n", "absolute path", 3},
       }) {
    const std::string code = "// line 1\n" + c.code + "extern \"C\" __global__ void k() {}\n";
    std::string message = Rejection(Source(code));
    INFO(code << "\n=> " << message);
    CHECK(Contains(message, c.reason));
    CHECK(Contains(message, "my_kernel.cu:" + std::to_string(c.line) + ":"));
  }
  // Includes are checked in every unit, and errors name that unit.
  RawSource source = Source();
  source.extra_units = {{"helper.cu", "#include \"/etc/passwd\"\n"}};
  CHECK(Contains(Rejection(source), "helper.cu:1"));
}

TEST_CASE("names, entries, units and sizes are checked", "[raw]") {
  auto with = [](auto change) {
    RawSource source = Source();
    change(source);
    return Rejection(source);
  };
  for (const char* name : {"", "a-b", "../x", "a b", "ünï"}) {
    CHECK(Contains(with([&](RawSource& s) { s.name = name; }), "[A-Za-z0-9_]"));
  }
  CHECK(Contains(with([](RawSource& s) { s.name = std::string(65, 'a'); }), "1 to 64"));
  CHECK(with([](RawSource& s) { s.name = std::string(64, 'a'); }) == "<accepted>");
  CHECK(Contains(with([](RawSource& s) { s.code.clear(); }), "empty"));
  CHECK(Contains(with([](RawSource& s) { s.entries.clear(); }), "no entry"));
  for (const char* entry : {"1k", "a b", "k()", "", "ns::k"}) {
    CHECK(Contains(with([&](RawSource& s) { s.entries = {entry}; }), "not a C identifier"));
  }
  CHECK(Contains(with([](RawSource& s) { s.entries = {"k", "k"}; }), "listed twice"));
  for (const char* unit : {"b.cpp", "../b.cu", "b/c.cu", ".cu", ".hidden.cu"}) {
    CHECK(Contains(with([&](RawSource& s) { s.extra_units = {{unit, "int x;"}}; }), "unit name"));
  }
  CHECK(Contains(with([](RawSource& s) { s.extra_units = {{"my_kernel.cu", "int x;"}}; }), "used twice"));
  CHECK(Contains(with([](RawSource& s) { s.extra_units = {{"b.cu", ""}}; }), "empty"));
  CHECK(with([](RawSource& s) { s.extra_units = {{"b.cu", "int x;"}}; }) == "<accepted>");

  std::string big(kMaxRawSourceBytes + 1, ' ');
  CHECK(Contains(with([&](RawSource& s) { s.code = big; }), "at most 1048576 bytes"));
  CHECK(Contains(with([&](RawSource& s) {
                   s.extra_units = {{"b.cu", std::string(kMaxRawSourceBytes, ' ')}};
                 }),
                 "all units together"));
  std::string fits = "extern \"C\" __global__ void k() {}\n";
  fits.resize(kMaxRawSourceBytes, ' ');
  CHECK(with([&](RawSource& s) { s.code = fits; }) == "<accepted>");
}

TEST_CASE("extra units become units of the spec in order", "[raw]") {
  RawSource source = Source();
  source.extra_units = {{"b.cu", "int b;"}, {"c-2.cu", "int c;"}};
  auto spec = SpecFromRawSource(source, Tree(), kCuda);
  REQUIRE(spec.ok());
  REQUIRE(spec->units.size() == 3);
  CHECK(spec->units[1].name == "b.cu");
  CHECK(spec->units[2].name == "c-2.cu");
  CHECK(spec->units[2].content == "int c;");
}

}  // namespace
}  // namespace kiln::kernels
