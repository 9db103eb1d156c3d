#include "tests/kernels/compile_fixture.h"

#include <catch2/catch.hpp>

#include "kernels/jit/arch.h"
#include "kernels/jit/op_generator.h"

namespace kiln::kernels::compile_test {

std::shared_ptr<const TreeSnapshot> Tree() {
  static std::shared_ptr<const TreeSnapshot> snapshot = [] {
    auto tree = KernelTree::Open(KILN_TEST_KERNELS_DIR);
    REQUIRE(tree.ok());
    return (*tree)->Current();
  }();
  return snapshot;
}

const server::NvrtcCompiler& Compiler() {
  static server::NvrtcCompiler compiler(server::CompilerOptions{KILN_TEST_CUDA_INCLUDE_DIR, ""});
  return compiler;
}

CompiledSpec GenerateAndCompile(const std::string& op, const Params& params, const std::string& arch_name) {
  auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
  INFO(op << ": " << spec.status().ToString());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse(arch_name), spec->arch_families, spec->uri);
  REQUIRE(arch.ok());
  CHECK(arch->str() == arch_name);
  auto result = Compiler().Compile(server::CompileRequest{&*spec, Tree().get(), *arch, {}, false, ""});
  INFO(spec->uri << " " << arch_name << ": " << result.status().ToString());
  REQUIRE(result.ok());
  CHECK(result->cubin.starts_with("\x7f"
                                  "ELF"));
  return {std::move(*spec), std::move(*result)};
}

void CheckBrokenHeaderFailsWithLog(const std::string& op, const Params& params, const std::string& header,
                                   const std::string& uri) {
  TreeSnapshot broken = *Tree();
  REQUIRE(broken.files.count(header) == 1);
  broken.files[header] += "\nthis is not C++;\n";
  auto spec = OpRegistry::Builtin().Generate(op, params, broken);
  REQUIRE(spec.ok());
  auto result = Compiler().Compile(
      server::CompileRequest{&*spec, &broken, *GpuArch::Parse("sm_90a"), {}, false, "/gen/" + uri});
  REQUIRE(!result.ok());
  CHECK(result.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string message(result.status().message());
  CHECK(message.find(uri) != std::string::npos);
  CHECK(message.find(header.substr(std::string("include/").size())) != std::string::npos);
  auto log = server::CompileLog(result.status());
  REQUIRE(log.has_value());
  CHECK(log->find("error") != std::string::npos);
}

}  // namespace kiln::kernels::compile_test
