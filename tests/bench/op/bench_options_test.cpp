#include "bench/op/bench_options.h"

#include <catch2/catch.hpp>

namespace kiln::bench {
namespace {

StatusOr<BenchOptions> Parse(std::vector<std::string> args) { return ParseBenchOptions(args); }

std::string ErrorOf(std::vector<std::string> args) {
  auto o = Parse(std::move(args));
  if (o.ok()) return "(accepted)";
  CHECK(o.status().code() == StatusCode::kInvalidArgument);
  return o.status().message();
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("kiln-bench options: a routine with shapes, dtypes and backends", "[bench]") {
  auto o = Parse({"--routine",
                  "rmsnorm",
                  "--shapes",
                  "rows=4096,hidden=4096;rows=1,hidden=4096",
                  "--dtype=bf16,fp16",
                  "--backends",
                  "kiln,reference,kiln_vec1",
                  "--iters",
                  "50",
                  "--warmup=5",
                  "--l2",
                  "flush",
                  "--timer",
                  "events",
                  "--seed",
                  "7",
                  "--out",
                  "a.json",
                  "--out",
                  "b.csv",
                  "--max-seconds",
                  "0.5"});
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  CHECK(o->mode == BenchMode::kRun);
  CHECK(o->routine == "rmsnorm");
  REQUIRE(o->shapes.size() == 2);
  CHECK(o->shapes[0] == ShapeAxes{{"rows", 4096}, {"hidden", 4096}});
  CHECK(o->dtypes == std::vector<std::string>{"bf16", "fp16"});
  CHECK(o->backends == std::vector<std::string>{"kiln", "reference", "kiln_vec1"});
  CHECK(o->iters == 50);
  CHECK(o->warmup == 5);
  CHECK(o->l2 == L2Mode::kFlush);
  CHECK(o->timer == TimerChoice::kEvents);
  CHECK(o->seed == 7);
  CHECK(o->max_seconds == 0.5);
  CHECK(o->outs == std::vector<std::string>{"a.json", "b.csv"});

  const auto cases = CommandLineCases(*o);
  REQUIRE(cases.size() == 4);  // dtypes x shapes
  CHECK(cases[0].dtype == "bf16");
  CHECK(cases[1].shape == ShapeAxes{{"rows", 1}, {"hidden", 4096}});
  CHECK(cases[2].dtype == "fp16");
}

TEST_CASE("kiln-bench options: defaults and the other modes", "[bench]") {
  auto run = Parse({"--routine", "rmsnorm", "--shapes", "rows=1,hidden=8"});
  REQUIRE(run.ok());
  CHECK(run->dtypes == std::vector<std::string>{"bf16"});
  CHECK(run->backends == std::vector<std::string>{"kiln", "reference"});
  CHECK(run->iters == 100);
  CHECK(run->warmup == 10);
  CHECK(run->l2 == L2Mode::kRotate);
  CHECK(run->timer == TimerChoice::kAuto);

  auto list = Parse({"--list", "cases.list", "--out", "r.json"});
  REQUIRE(list.ok());
  CHECK(list->mode == BenchMode::kList);
  CHECK(list->list_file == "cases.list");
  auto traces = Parse({"--traces", "kernels/traces"});
  REQUIRE(traces.ok());
  CHECK(traces->mode == BenchMode::kTraces);
  CHECK(traces->traces_dir == "kernels/traces");

  auto gen = Parse({"--generate-list", "kernels/traces", "--out", "default.list"});
  REQUIRE(gen.ok());
  CHECK(gen->mode == BenchMode::kGenerateList);
  CHECK(gen->outs == std::vector<std::string>{"default.list"});

  CHECK(Parse({"--list-routines"})->mode == BenchMode::kListRoutines);
  CHECK(Parse({"--help"})->mode == BenchMode::kHelp);
  CHECK(Contains(BenchUsage(), "--routine"));

  // --overhead: --iters and --warmup count batches of 1000 calls.
  auto overhead = Parse({"--overhead", "--iters", "20", "--warmup", "2", "--out", "o.json"});
  REQUIRE(overhead.ok());
  CHECK(overhead->mode == BenchMode::kOverhead);
  CHECK(overhead->iters == 20);
  CHECK(overhead->warmup == 2);
  CHECK(Contains(BenchUsage(), "--overhead"));
  CHECK(Contains(ErrorOf({"--overhead", "--shapes", "rows=1"}), "go with --routine"));
  CHECK(Contains(ErrorOf({"--overhead=1"}), "--overhead takes no value"));
  CHECK(Contains(ErrorOf({"--overhead", "--list-routines"}), "give one of --routine"));

  // --check: correctness only, every routine; the seed, device and socket apply.
  auto check = Parse({"--check", "--seed", "7", "--socket", "/tmp/k.sock"});
  REQUIRE(check.ok());
  CHECK(check->mode == BenchMode::kCheck);
  CHECK(check->seed == 7);
  CHECK(check->socket == "/tmp/k.sock");
  CHECK(Contains(BenchUsage(), "--check"));
  CHECK(Contains(ErrorOf({"--check=1"}), "--check takes no value"));
  CHECK(Contains(ErrorOf({"--check", "--overhead"}), "give one of --routine"));
  CHECK(Contains(ErrorOf({"--check", "--dtype", "fp16"}), "go with --routine"));
  CHECK(check->only.empty());
  // --only: --check's filter, routines by name.
  auto only = Parse({"--check", "--only", "fused_moe,moe_unpermute"});
  REQUIRE(only.ok());
  CHECK(only->only == std::vector<std::string>{"fused_moe", "moe_unpermute"});
  CHECK(Contains(ErrorOf({"--check", "--only", "fused_moe,,gemm"}), "--only 'fused_moe,,gemm': '' is not a name"));
  CHECK(Contains(ErrorOf({"--traces", "kernels/traces", "--only", "gemm"}), "--only goes with --check"));
}

TEST_CASE("kiln-bench options: every bad flag is refused, naming it and what is allowed", "[bench]") {
  CHECK(Contains(ErrorOf({}), "nothing to do"));
  CHECK(Contains(ErrorOf({"--routine", "rmsnorm"}), "give --shapes"));
  CHECK(Contains(ErrorOf({"--routine", "rmsnorm", "--shapes", "rows=0,hidden=8"}), "rows must be positive"));
  CHECK(Contains(ErrorOf({"--routine", "rmsnorm", "--shapes", "rows=x"}), "'x' is not a positive integer"));
  CHECK(Contains(ErrorOf({"--routine", "rmsnorm", "--shapes", "rows=1,rows=2"}), "'rows' given twice"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--iters", "0"}),
                 "--iters '0': expected an integer in 1.."));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--warmup", "-1"}), "--warmup '-1'"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--l2", "cold"}), "expected rotate, flush or warm"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--timer", "nvtx"}), "expected auto, cupti or events"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--out", "r.txt"}), "must end in .json or .csv"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--max-seconds", "0"}), "--max-seconds '0'"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--backends", "kiln,kiln"}), "'kiln' given twice"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--label", "a b"}), "no spaces"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--shapes", "a=1", "--iters"}), "--iters: missing its value"));
  CHECK(Contains(ErrorOf({"--routine", "r", "--list", "x.list"}), "give one of"));
  CHECK(Contains(ErrorOf({"--list", "x.list", "--shapes", "a=1"}), "go with --routine"));
  CHECK(Contains(ErrorOf({"--frobnicate"}), "unknown flag '--frobnicate'"));
  CHECK(Contains(ErrorOf({"rmsnorm"}), "unexpected argument 'rmsnorm'"));
  CHECK(Contains(ErrorOf({"--help=yes"}), "--help takes no value"));
}

TEST_CASE("the reproduce command of a row names everything that shapes the measurement", "[bench]") {
  auto o = Parse({"--list", "x.list", "--iters", "30", "--l2", "flush", "--seed", "9", "--device", "1"});
  REQUIRE(o.ok());
  BenchCase c{"rmsnorm", "bf16", {{"rows", 64}, {"hidden", 4096}}, {"kiln", "reference"}, "llama3.1-8b-decode-b64",
              "x"};
  CHECK(ReproduceCommand(*o, c, "kiln_vec2") ==
        "kiln-bench --routine rmsnorm --dtype bf16 --shapes rows=64,hidden=4096 --backends kiln_vec2 --iters 30 "
        "--warmup 10 --l2 flush --timer auto --seed 9 --device 1 --label llama3.1-8b-decode-b64");
  // The command parses back into the same case.
  std::vector<std::string> words;
  std::string cmd = ReproduceCommand(*o, c, "kiln");
  for (size_t start = cmd.find(' ') + 1; start < cmd.size();) {
    size_t end = cmd.find(' ', start);
    if (end == std::string::npos) end = cmd.size();
    words.push_back(cmd.substr(start, end - start));
    start = end + 1;
  }
  auto back = Parse(words);
  REQUIRE(back.ok());
  const auto cases = CommandLineCases(*back);
  REQUIRE(cases.size() == 1);
  CHECK(cases[0].shape == c.shape);
  CHECK(cases[0].backends == std::vector<std::string>{"kiln"});
  CHECK(back->iters == 30);
}

}  // namespace
}  // namespace kiln::bench
