#include "bench/op/result_row.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "tests/support/temp_dir.h"

namespace kiln::bench {
namespace {

ResultRow OkRow() {
  ResultRow r;
  r.routine = "rmsnorm";
  r.backend = "kiln";
  r.label = "llama3.1-8b-prefill-2048";
  r.shape = "rows=2048,hidden=4096";
  r.dtype = "bf16";
  r.arch = "sm_90";
  r.gpu = "NVIDIA H200";
  r.refcheck = "pass";
  r.refcheck_detail = "max abs err 0.0078, over 8388608 elements";
  r.max_abs_err = 0.0078125;
  r.stats = SummarizeTimes({10.0, 12.0, 11.0});
  r.warmup = 10;
  r.mechanism = "cupti_activity";
  r.l2 = "rotate 5 sets (168 MB)";
  r.bytes = 2.0 * 2048 * 4096 * 2 + 4096 * 2;  // 33562624
  r.copy_gbps = 4000;
  r.kernels = "kiln_rmsnorm";
  r.reproduce = "kiln-bench --routine rmsnorm --dtype bf16 --shapes rows=2048,hidden=4096 --backends kiln";
  return r;
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(field);
      field.clear();
    } else {
      field += c;
    }
  }
  out.push_back(field);
  return out;
}

TEST_CASE("a result row: derived bandwidth, percent of the copy bandwidth, JSON fields", "[bench]") {
  const ResultRow r = OkRow();
  CHECK(AchievedGBps(r) == Approx(33562624.0 / 11e3));  // bytes / median
  CHECK(PercentOfCopy(r) == Approx(100.0 * 33562624.0 / 11e3 / 4000));
  CHECK(std::isnan(AchievedTFlops(r)));  // no flops: not meaningful
  const nlohmann::json j = RowToJson(r);
  CHECK(j["median_us"] == 11.0);
  CHECK(j["min_us"] == 10.0);
  CHECK(j["std_us"].get<double>() == Approx(1.0));
  CHECK(j["iterations"] == 3);
  CHECK(j["mechanism"] == "cupti_activity");
  CHECK(j["refcheck"] == "pass");
  CHECK(j["tflops"].is_null());
  CHECK(j["arch"] == "sm_90");
  CHECK(j["gpu"] == "NVIDIA H200");
  CHECK(j["kernel_parts"] == "");  // one kernel: nothing to break down
  CHECK(j["reproduce"].get<std::string>().rfind("kiln-bench --routine rmsnorm", 0) == 0);
}

TEST_CASE("a failed row carries no timings in any rendering", "[bench]") {
  ResultRow r = OkRow();
  r.status = "refcheck_failed";
  r.refcheck = "FAIL";
  const nlohmann::json j = RowToJson(r);
  CHECK(j["median_us"].is_null());
  CHECK(j["iterations"].is_null());
  CHECK(j["gbps"].is_null());
  const auto fields = SplitCsv(RowToCsv(r));
  const auto header = SplitCsv(CsvHeader());
  REQUIRE(fields.size() == header.size());
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == "median_us" || header[i] == "gbps" || header[i] == "iterations") CHECK(fields[i].empty());
  CHECK(RowToTableLine(r).find("refcheck_failed") != std::string::npos);
}

TEST_CASE("CSV rows: one field per header column, quoted where needed", "[bench]") {
  ResultRow r = OkRow();
  r.message = "x.list:3: a \"quoted\", comma";
  r.kernel_parts =
      "kiln_fused_moe_gate_up 12.31 | +0.84 kiln_fused_moe_down 7.02";  // bars and signs, no quoting needed
  const auto header = SplitCsv(CsvHeader());
  const auto fields = SplitCsv(RowToCsv(r));
  REQUIRE(fields.size() == header.size());
  for (size_t i = 0; i < header.size(); ++i) {
    INFO(header[i]);
    if (header[i] == "message") CHECK(fields[i] == r.message);
    if (header[i] == "kernel_parts") CHECK(fields[i] == r.kernel_parts);
    if (header[i] == "median_us") CHECK(fields[i] == "11.000");
    if (header[i] == "shape") CHECK(fields[i] == "rows=2048,hidden=4096");
  }
  for (const char* column :
       {"routine",   "backend",     "shape",       "dtype",     "arch",      "gpu",         "median_us", "std_us",
        "min_us",    "stream_us",   "iterations",  "mechanism", "l2",        "gbps",        "tflops",    "pct_of_copy",
        "read_gbps", "pct_of_read", "overhead_us", "refcheck",  "reproduce", "kernel_parts"})
    CHECK(std::find(header.begin(), header.end(), column) != header.end());
}

TEST_CASE("rows are written as JSON or CSV by the file's extension", "[bench]") {
  kiln::testing::TempDir dir("kiln-bench-rows");
  const std::vector<ResultRow> rows = {OkRow(), OkRow()};
  REQUIRE(WriteRows(dir / "r.json", {{"tool", "kiln-bench"}}, rows).ok());
  std::ifstream json_in(dir / "r.json");
  const nlohmann::json doc = nlohmann::json::parse(json_in);
  CHECK(doc["meta"]["tool"] == "kiln-bench");
  CHECK(doc["rows"].size() == 2);
  REQUIRE(WriteRows(dir / "r.csv", {}, rows).ok());
  std::ifstream csv_in(dir / "r.csv");
  std::stringstream csv;
  csv << csv_in.rdbuf();
  CHECK(csv.str() == CsvHeader() + "\n" + RowToCsv(rows[0]) + "\n" + RowToCsv(rows[1]) + "\n");
  CHECK(WriteRows(dir / "r.txt", {}, rows).code() == StatusCode::kInvalidArgument);
  CHECK(WriteRows(dir / "missing/r.csv", {}, rows).code() == StatusCode::kInternal);
}

}  // namespace
}  // namespace kiln::bench
