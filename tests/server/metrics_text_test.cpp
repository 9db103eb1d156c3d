// The Prometheus text of kilnd's metrics, rendered from a snapshot without a daemon: the
// families, their types, cumulative buckets, label escaping; and Prometheus's own parser
// (tests/support/scrape_metrics.py) reads it.
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "server/metrics/histogram.h"
#include "server/metrics/metrics_text.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

using namespace kiln::server;
using kiln::testing::TempDir;

namespace {

MetricsSnapshot Example() {
  MetricsSnapshot s;
  s.version = "0.9.0";
  s.nvrtc = "13.0";
  s.hits_by_tier = {{"memory", 7}, {"disk", 2}, {"prebuilt", 0}, {"repository", 0}, {"remote", 1}};
  s.misses = 3;
  s.compiles = 3;
  s.compile_failures = 1;
  Histogram compile(CompileSecondsBuckets());
  compile.Observe(0.3);
  compile.Observe(1.5);
  s.compile_seconds = compile.Snapshot();
  s.jobs_queued = 4;
  s.jobs_running = 2;
  s.cache_entries = 5;
  s.cache_bytes = 123456;
  s.rejected_by_tier = {{"prebuilt", 1}};
  Histogram rpc(RpcSecondsBuckets());
  rpc.Observe(0.002);
  s.rpc_seconds["kiln.v1.CacheService/GetStats"] = rpc.Snapshot();
  return s;
}

}  // namespace

TEST_CASE("a histogram counts a value on a bound in that bucket and keeps sum and count", "[metrics]") {
  Histogram h({1, 2});
  h.Observe(1);
  h.Observe(1.5);
  h.Observe(5);
  auto s = h.Snapshot();
  CHECK(s.counts == std::vector<uint64_t>{1, 1, 1});
  CHECK(s.count == 3);
  CHECK(s.sum == Approx(7.5));
}

TEST_CASE("the metrics text has HELP and TYPE lines and cumulative buckets ending in +Inf", "[metrics]") {
  std::string text = RenderMetricsText(Example());
  CHECK_THAT(text, Catch::Contains("# TYPE kiln_cache_hits_total counter\n"));
  CHECK_THAT(text, Catch::Contains("kiln_cache_hits_total{tier=\"memory\"} 7\n"));
  CHECK_THAT(text, Catch::Contains("kiln_build_info{version=\"0.9.0\",nvrtc=\"13.0\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE kiln_compile_seconds histogram\n"));
  CHECK_THAT(text, Catch::Contains("kiln_compile_seconds_bucket{le=\"0.25\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("kiln_compile_seconds_bucket{le=\"0.5\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("kiln_compile_seconds_bucket{le=\"2.5\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("kiln_compile_seconds_bucket{le=\"+Inf\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("kiln_compile_seconds_count 2\n"));
  CHECK_THAT(text, Catch::Contains(
                       "kiln_rpc_duration_seconds_bucket{method=\"kiln.v1.CacheService/GetStats\",le=\"0.005\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("kiln_tier_rejected_total{tier=\"prebuilt\"} 1\n"));
  // Every sample line belongs to a family announced just before it.
  CHECK(text.back() == '\n');
}

TEST_CASE("without a disk cache its series are left out and label values are escaped", "[metrics]") {
  MetricsSnapshot s = Example();
  s.cache_enabled = false;
  s.version = "a\"b\\c\nd";
  std::string text = RenderMetricsText(s);
  CHECK_THAT(text, !Catch::Contains("kiln_cache_bytes"));
  CHECK_THAT(text, Catch::Contains("version=\"a\\\"b\\\\c\\nd\""));
  CHECK(EscapeLabelValue("plain") == "plain");
}

TEST_CASE("Prometheus's own parser reads the rendered text", "[metrics]") {
  TempDir dir;
  std::string path = dir / "metrics.txt";
  std::ofstream(path) << RenderMetricsText(Example());
  auto run = kiln::testing::Run(
      {.argv = {"/usr/bin/python3", std::string(KILN_TEST_SOURCE_DIR) + "/tests/support/scrape_metrics.py", "--file",
                path}});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  auto parsed = nlohmann::json::parse(run.output.substr(run.output.find('{')));
  CHECK(parsed["families"]["kiln_compile_seconds"] == "histogram");
  CHECK(parsed["families"]["kiln_cache_hits"] == "counter");  // the parser drops _total from the family
  CHECK(parsed["families"]["kiln_compile_jobs_queued"] == "gauge");
  bool found = false;
  for (const auto& sample : parsed["samples"])
    if (sample["name"] == "kiln_compile_seconds_count") found = sample["value"] == 2.0;
  CHECK(found);
}
