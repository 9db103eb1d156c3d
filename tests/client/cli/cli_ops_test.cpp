// kiln ops and kiln get OP --help against a real kilnd: the table, --json (the ListOps reply),
// one op's help, an unknown op, a daemon without trace definitions, and docs/ops.md, which
// must be exactly what `kiln ops --markdown` prints against a daemon serving this tree's kernels/.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::testing::RunResult;
using nlohmann::json;
namespace fs = std::filesystem;

struct Daemon {
  explicit Daemon(std::string kernels_dir = "")
      : daemon(kiln::testing::DaemonOptions{.root = dir.path(), .kernels_dir = std::move(kernels_dir)}) {}

  kiln::testing::TempDir dir{"kiln-cli-ops"};
  kiln::testing::DaemonProcess daemon;

  RunResult Cli(std::vector<std::string> args) const {
    kiln::testing::SubprocessOptions p;
    p.argv = {kiln::testing::KilnCliPath()};
    for (auto& a : args) p.argv.push_back(std::move(a));
    p.set_env = {{"KILN_SOCKET", daemon.socket()}};
    return kiln::testing::Run(std::move(p), std::chrono::seconds(60));
  }
};

bool Has(const RunResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

}  // namespace

TEST_CASE("kiln ops lists every op with its family, arch families and params", "[client][cli][daemon][discovery]") {
  Daemon d;
  auto r = d.Cli({"ops"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const char* text : {"NAME", "FAMILY", "ARCH", "PARAMS", "rmsnorm", "fused_add_rmsnorm", "batch_decode",
                           "top_k_sampling", "tensor_stats", "all_reduce", "sm_80+",
                           "dtype (fp32, fp16, bf16; required), hidden (an integer in 1..65536; required), "
                           "vec (a power of two in 1..16, or auto; default auto)",
                           "`kiln get OP --help`"})
    CHECK(Has(r, text));
  json reply = json::parse(d.Cli({"ops", "--json"}).output);
  CHECK(Has(r, std::to_string(reply["ops"].size()) + " ops;"));

  auto one = d.Cli({"ops", "rmsnorm"});
  INFO(one.output);
  CHECK(one.exit_code == 0);
  CHECK(Has(one, "rmsnorm"));
  CHECK_FALSE(Has(one, "fused_add_rmsnorm"));
  CHECK(Has(one, "1 op;"));
}

TEST_CASE("kiln ops --json prints the ListOps reply as proto3 JSON", "[client][cli][daemon][discovery]") {
  Daemon d;
  auto r = d.Cli({"ops", "--json"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  json reply = json::parse(r.output);
  REQUIRE(reply["ops"].size() > 10);
  std::string previous;
  for (const auto& op : reply["ops"]) {
    const std::string name = op["name"];
    INFO(name);
    CHECK(name > previous);
    previous = name;
    CHECK_FALSE(op["family"].get<std::string>().empty());
    CHECK_FALSE(op["description"].get<std::string>().empty());
    CHECK_FALSE(op["archFamilies"].empty());
    // The trace definition is the file's text, and parses.
    REQUIRE(op.contains("traceDefinition"));
    CHECK(json::parse(op["traceDefinition"].get<std::string>())["name"] == name);
  }
  const auto rmsnorm = std::find_if(reply["ops"].begin(), reply["ops"].end(),
                                    [](const json& op) { return op["name"] == "rmsnorm"; });
  REQUIRE(rmsnorm != reply["ops"].end());
  const json& dtype = (*rmsnorm)["params"][0];
  CHECK(dtype["name"] == "dtype");
  CHECK(dtype["kind"] == "KIND_CHOICE");
  CHECK(dtype["choices"] == json::array({"fp32", "fp16", "bf16"}));
  CHECK(dtype["required"] == true);
  const json& hidden = (*rmsnorm)["params"][1];
  CHECK(hidden["kind"] == "KIND_INT");
  CHECK(hidden["min"] == 1);
  CHECK(hidden["max"] == 65536);
  CHECK(hidden["allowed"] == "an integer in 1..65536");
  const json& vec = (*rmsnorm)["params"][2];
  CHECK(vec["powerOfTwo"] == true);
  CHECK(vec["defaultValue"] == "auto");
  CHECK_FALSE(vec.contains("required"));  // false: left out, as proto3 JSON does
  CHECK((*rmsnorm)["archFamilies"] == json::array({"sm_80+"}));
}

TEST_CASE("kiln get OP --help prints the op's params, defaults, arch families and trace definition",
          "[client][cli][daemon][discovery]") {
  Daemon d;
  auto r = d.Cli({"get", "rmsnorm", "--help"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const char* text : {"Usage: kiln get rmsnorm dtype=DTYPE hidden=HIDDEN [vec=VEC] [OPTIONS]",
                           "rmsnorm (family norm): ",
                           "Params:",
                           "ALLOWED",
                           "DEFAULT",
                           "MEANING",
                           "dtype",
                           "fp32, fp16, bf16",
                           "required",
                           "an integer in 1..65536",
                           "a power of two in 1..16, or auto",
                           "auto",
                           "element type of every tensor",
                           "Arch families: sm_80+",
                           "Trace definition (kernels/traces/rmsnorm.json):",
                           "axes     rows, hidden",
                           "inputs   input[rows, hidden] fp32/fp16/bf16, weight[hidden] fp32/fp16/bf16",
                           "outputs  out[rows, hidden] same as input",
                           "scalars  eps float64 = 1e-06",
                           "api      kiln::ops::rms_norm, kiln_rms_norm",
                           "kiln get --help"})
    CHECK(Has(r, text));
  // `kiln help get OP` is the same, and params given with the op do not change it.
  CHECK(d.Cli({"help", "get", "rmsnorm"}).output == r.output);
  CHECK(d.Cli({"get", "rmsnorm", "dtype=bf16", "--arch", "sm_90", "--help"}).output == r.output);
  // An internal op's definition returns a struct and names its header.
  auto stats = d.Cli({"get", "tensor_stats", "--help"});
  INFO(stats.output);
  CHECK(stats.exit_code == 0);
  CHECK(Has(stats, "returns       TensorStats {count int64"));
  CHECK(Has(stats, "internal api  kiln::client::diag::ComputeTensorStats, client/diag/tensor_stats.h"));
  // --json: the op's OpInfo.
  json info = json::parse(d.Cli({"get", "rmsnorm", "--help", "--json"}).output);
  CHECK(info["name"] == "rmsnorm");
  CHECK(info["params"].size() == 3);

  // Without an op, the generic help of get (no daemon needed).
  auto generic = d.Cli({"get", "--help", "--socket", d.dir / "none.sock"});
  CHECK(generic.exit_code == 0);
  CHECK(Has(generic, "Usage: kiln get OP [KEY=VALUE...]"));
  CHECK(Has(generic, "--arch ARCH"));
}

TEST_CASE("kiln get OP --help for an unknown op exits 1 naming the known ops", "[client][cli][daemon][discovery]") {
  Daemon d;
  auto r = d.Cli({"get", "nosuchop", "--help"});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(Has(r, "kiln get: ListOps nosuchop: unknown op 'nosuchop'; known ops: "));
  CHECK(Has(r, "rmsnorm"));
  auto ops = d.Cli({"ops", "nosuchop"});
  CHECK(ops.exit_code == 1);
  CHECK(Has(ops, "unknown op 'nosuchop'"));
}

TEST_CASE("kiln ops against a daemon without trace definitions says so", "[client][cli][daemon][discovery]") {
  kiln::testing::TempDir kernels("kiln-cli-ops-kernels");
  for (const char* part : {"include", "src"})
    fs::copy(kiln::testing::KernelsDir() + "/" + part, kernels / part, fs::copy_options::recursive);
  Daemon d(kernels.path());
  auto help = d.Cli({"get", "rmsnorm", "--help"});
  INFO(help.output);
  CHECK(help.exit_code == 0);
  CHECK(Has(help, "Trace definition: none in the daemon's kernels folder"));
  CHECK(Has(help, "Arch families: sm_80+"));
  auto md = d.Cli({"ops", "rmsnorm", "--markdown"});
  CHECK(md.exit_code == 0);
  CHECK(Has(md, "- trace definition: none in the daemon's kernels folder"));
}

TEST_CASE("docs/ops.md is what kiln ops --markdown prints for this tree", "[client][cli][daemon][discovery][docs]") {
  Daemon d;  // serving the tree's kernels/ (KILN_TEST_KERNELS_DIR names another tree's)
  // The documented command, run as written; its output is kept in the build tree so a stale
  // docs/ops.md can be replaced by copying it.
  const std::string fresh = std::string(KILN_TEST_BINARY_DIR) + "/docs/ops.md";
  fs::create_directories(fs::path(fresh).parent_path());
  auto r = kiln::testing::Run(
      {.argv = {"/bin/sh", "-c", "exec \"$0\" ops --markdown > \"$1\"", kiln::testing::KilnCliPath(), fresh},
       .set_env = {{"KILN_SOCKET", d.daemon.socket()}}});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string markdown = kiln::testing::ReadFile(fresh);
  REQUIRE(markdown.rfind("# Op reference\n", 0) == 0);
  for (const char* text : {"\n## norm\n", "\n### `rmsnorm`\n", "| `hidden` | an integer in 1..65536 | required |",
                           "- arch families: sm_80+\n",
                           "  - inputs: `input[rows, hidden] fp32/fp16/bf16`, `weight[hidden] fp32/fp16/bf16`\n"})
    CHECK(markdown.find(text) != std::string::npos);
  const std::string committed = (fs::path(kiln::testing::KernelsDir()).parent_path() / "docs" / "ops.md").string();
  const std::string docs = fs::exists(committed) ? kiln::testing::ReadFile(committed) : "";
  if (docs != markdown)
    FAIL("docs/ops.md is stale: the current reference is " << fresh << "; copy it over docs/ops.md (`cp " << fresh
                                                           << " " << committed
                                                           << "`), or build, start kilnd on this tree, and run "
                                                              "`build/client/kiln ops --markdown > docs/ops.md`");
}
