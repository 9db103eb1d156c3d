// kiln-bench as a process: usage errors exit with 2, --help and --generate-list work without a
// GPU, and a run without a GPU says so and exits with 77 (CUDA_VISIBLE_DEVICES="" hides any
// GPU the machine has, so this holds on the GPU machine too).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "bench/op/default_list.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace kiln::bench {
namespace {

testing::RunResult RunBench(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  testing::SubprocessOptions options;
  options.argv = {KILN_TEST_KILN_BENCH};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.set_env = std::move(env);
  options.set_env["KILN_SOCKET"] = "/nonexistent/kilnd.sock";
  return testing::Run(options, std::chrono::seconds(60));
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("kiln-bench without a GPU says so and exits with 77", "[bench]") {
  auto r = RunBench({"--routine", "rmsnorm", "--shapes", "rows=1,hidden=4096"}, {{"CUDA_VISIBLE_DEVICES", ""}});
  INFO(r.output);
  CHECK(r.exit_code == 77);
  CHECK(Contains(r.output, "kiln-bench: SKIPPED: no GPU"));

  testing::TempDir dir("kiln-bench-list");
  std::ofstream(dir / "one.list") << "rmsnorm bf16 rows=1,hidden=4096 kiln,reference\n";
  auto list = RunBench({"--list", dir / "one.list"}, {{"CUDA_VISIBLE_DEVICES", ""}});
  INFO(list.output);
  CHECK(list.exit_code == 77);

  auto overhead = RunBench({"--overhead", "--iters", "1"}, {{"CUDA_VISIBLE_DEVICES", ""}});
  INFO(overhead.output);
  CHECK(overhead.exit_code == 77);
  CHECK(Contains(overhead.output, "kiln-bench: SKIPPED: no GPU"));
}

TEST_CASE("kiln-bench usage errors exit with 2 and name the problem", "[bench]") {
  auto bad_flag = RunBench({"--routine", "rmsnorm", "--shapes", "rows=1,hidden=8", "--iters", "zero"});
  CHECK(bad_flag.exit_code == 2);
  CHECK(Contains(bad_flag.output, "--iters 'zero'"));

  testing::TempDir dir("kiln-bench-list");
  std::ofstream(dir / "bad.list") << "# header\nrmsnorm bf16 rows=1,hidden=8\n";
  auto bad_list = RunBench({"--list", dir / "bad.list"});
  CHECK(bad_list.exit_code == 2);
  CHECK(Contains(bad_list.output, "bad.list:2: expected 'routine dtype shape backends [label]'"));

  auto missing = RunBench({"--list", dir / "missing.list"});
  CHECK(missing.exit_code == 2);
  CHECK(Contains(missing.output, "cannot read the file"));
}

TEST_CASE("kiln-bench --help, --list-routines and --generate-list need no GPU", "[bench]") {
  auto help = RunBench({"--help"});
  CHECK(help.exit_code == 0);
  CHECK(Contains(help.output, "--generate-list"));

  auto routines = RunBench({"--list-routines"});
  CHECK(routines.exit_code == 0);
  CHECK(Contains(routines.output, "rmsnorm: "));
  CHECK(Contains(routines.output, "--shapes rows=N,hidden=N"));
  // One runner for every op: the decode and sampling families too.
  for (const char* name : {"append_paged_kv: ", "batch_decode: ", "top_k_sampling: ", "top_p_sampling: ",
                           "top_k_top_p_sampling: ", "min_p_sampling: ", "argmax: "})
    CHECK(Contains(routines.output, name));
  CHECK(Contains(routines.output,
                 "--shapes batch=N,kv_len=N,num_qo_heads=N,num_kv_heads=N,head_dim=N,page_size=N,num_pages=N,"
                 "nnz_pages=N,indptr_len=N   --dtype fp16,bf16"));
  CHECK(Contains(routines.output, "--shapes batch=N,vocab=N   --dtype fp32"));

  testing::TempDir dir("kiln-bench-gen");
  const std::string traces = std::string(KILN_TEST_SOURCE_DIR) + "/kernels/traces";
  auto gen = RunBench({"--generate-list", traces, "--out", dir / "default.list"});
  INFO(gen.output);
  REQUIRE(gen.exit_code == 0);
  std::ifstream in(dir / "default.list");
  std::stringstream written;
  written << in.rdbuf();
  auto expected = GenerateDefaultListFromDir(traces);
  REQUIRE(expected.ok());
  CHECK(written.str() == *expected);

  auto no_traces = RunBench({"--generate-list", dir / "none"});
  CHECK(no_traces.exit_code == 1);
  CHECK(Contains(no_traces.output, "is not a folder"));
}

}  // namespace
}  // namespace kiln::bench
