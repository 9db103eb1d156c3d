#include "server/jit/pch_key.h"

#include <catch2/catch.hpp>
#include <set>

#include "kernels/jit/op_generator.h"

namespace kiln::server {
namespace {

using kernels::JitSpec;
using kernels::SourceFile;

TEST_CASE("DirectivePrefix is the leading block of directives, comments and blank lines", "[pch]") {
  CHECK(DirectivePrefix("#include \"a.h\"\n#include <b.h>\nint x;\n#include \"c.h\"\n") ==
        "#include \"a.h\"\n#include <b.h>\n");
  CHECK(DirectivePrefix(
            "// comment\n\n/* block\n   int not_code; */\n#define X \\\n  1\n#include \"a.h\"\nnamespace n {}\n") ==
        "// comment\n\n/* block\n   int not_code; */\n#define X \\\n  1\n#include \"a.h\"\n");
  CHECK(DirectivePrefix("int x;\n#include \"a.h\"\n").empty());
  CHECK(DirectivePrefix("#include \"a.h\"\n") == "#include \"a.h\"\n");
  CHECK(DirectivePrefix("#include \"a.h\" /* opens\n int still_comment; */\n#include \"b.h\"\nx;\n") ==
        "#include \"a.h\" /* opens\n int still_comment; */\n#include \"b.h\"\n");
}

JitSpec SpecWithConfig(const std::string& unit, const std::string& config) {
  JitSpec spec;
  spec.units.push_back({"u.cu", unit, SourceFile::Origin::kKernels, "src/u.cu"});
  spec.headers.push_back({"kiln_config.cuh", config, SourceFile::Origin::kGenerated, ""});
  return spec;
}

TEST_CASE("PchKey keys the spec headers a PCH can hold, and only those", "[pch]") {
  kernels::TreeSnapshot tree;
  tree.digest = "tree-1";
  tree.files["include/kiln/a.cuh"] = "#pragma once\n";
  const std::string after = "#include \"kiln/a.cuh\"\nnamespace boundary {}\n#include \"kiln_config.cuh\"\n";
  const std::string inside = "#include \"kiln/a.cuh\"\n#include \"kiln_config.cuh\"\nnamespace boundary {}\n";

  JitSpec a = SpecWithConfig(after, "#define H 1\n"), b = SpecWithConfig(after, "#define H 2\n");
  CHECK(PchKey(a.units[0], a, &tree) == PchKey(b.units[0], b, &tree));  // config after the prefix
  // Named in a comment of the prefix only: still outside the PCH.
  const std::string commented = "// includes kiln_config.cuh below\n/* kiln_config.cuh */\n" + after;
  JitSpec ca = SpecWithConfig(commented, "#define H 1\n"), cb = SpecWithConfig(commented, "#define H 2\n");
  CHECK(PchKey(ca.units[0], ca, &tree) == PchKey(cb.units[0], cb, &tree));
  CHECK(PchKey(a.units[0], a, &tree).size() == 16);

  JitSpec c = SpecWithConfig(inside, "#define H 1\n"), d = SpecWithConfig(inside, "#define H 2\n");
  CHECK(PchKey(c.units[0], c, &tree) != PchKey(d.units[0], d, &tree));  // config inside it

  // Reached through a tree header, or through a computed include: keyed too.
  kernels::TreeSnapshot reaching = tree;
  reaching.files["include/kiln/a.cuh"] = "#include \"kiln_config.cuh\"\n";
  CHECK(PchKey(a.units[0], a, &reaching) != PchKey(b.units[0], b, &reaching));
  const std::string computed = "#define CFG \"kiln_config.cuh\"\n#include CFG\nint x;\n";
  JitSpec e = SpecWithConfig(computed, "#define H 1\n"), f = SpecWithConfig(computed, "#define H 2\n");
  CHECK(PchKey(e.units[0], e, &tree) != PchKey(f.units[0], f, &tree));

  // Another tree, another unit name or another prefix: another folder.
  kernels::TreeSnapshot edited = tree;
  edited.digest = "tree-2";
  CHECK(PchKey(a.units[0], a, &tree) != PchKey(a.units[0], a, &edited));
  JitSpec renamed = a;
  renamed.units[0].name = "v.cu";
  CHECK(PchKey(a.units[0], a, &tree) != PchKey(renamed.units[0], renamed, &tree));
  JitSpec other_prefix = SpecWithConfig("#define Y 1\n" + after, "#define H 1\n");
  CHECK(PchKey(a.units[0], a, &tree) != PchKey(other_prefix.units[0], other_prefix, &tree));
}

TEST_CASE("every rmsnorm specialization shares one PCH folder", "[pch]") {
  auto tree = kernels::KernelTree::Open(KILN_TEST_KERNELS_DIR);
  REQUIRE(tree.ok());
  auto snapshot = (*tree)->Current();
  std::set<std::string> keys;
  for (const char* op : {"rmsnorm", "fused_add_rmsnorm"}) {
    for (const char* dtype : {"fp32", "bf16"}) {
      for (const char* hidden : {"1", "4096", "65536"}) {
        auto spec = kernels::OpRegistry::Builtin().Generate(op, {{"dtype", dtype}, {"hidden", hidden}}, *snapshot);
        REQUIRE(spec.ok());
        keys.insert(PchKey(spec->units[0], *spec, snapshot.get()));
      }
    }
  }
  CHECK(keys.size() == 1);
}

}  // namespace
}  // namespace kiln::server
