#include "bench/op/result_row.h"

#include <cstdio>
#include <fstream>

#include "client/core/api/invalid_argument.h"

namespace kiln::bench {
namespace {

std::string Number(double v, const char* format = "%.4g") {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

nlohmann::json JsonNumber(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

bool HasTimes(const ResultRow& row) { return row.status == "ok" && row.stats.n > 0; }

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

struct Column {
  const char* name;
  std::string (*value)(const ResultRow&);
};

double TimeOr(const ResultRow& r, double v) { return HasTimes(r) ? v : NAN; }

// The CSV columns, in order; JSON uses the same names.
const std::vector<Column>& Columns() {
  static const std::vector<Column> kColumns = {
      {"routine", [](const ResultRow& r) { return r.routine; }},
      {"backend", [](const ResultRow& r) { return r.backend; }},
      {"label", [](const ResultRow& r) { return r.label; }},
      {"shape", [](const ResultRow& r) { return r.shape; }},
      {"dtype", [](const ResultRow& r) { return r.dtype; }},
      {"arch", [](const ResultRow& r) { return r.arch; }},
      {"gpu", [](const ResultRow& r) { return r.gpu; }},
      {"status", [](const ResultRow& r) { return r.status; }},
      {"refcheck", [](const ResultRow& r) { return r.refcheck; }},
      {"refcheck_detail", [](const ResultRow& r) { return r.refcheck_detail; }},
      {"max_abs_err", [](const ResultRow& r) { return Number(r.max_abs_err); }},
      {"median_us", [](const ResultRow& r) { return Number(TimeOr(r, r.stats.median), "%.3f"); }},
      {"std_us", [](const ResultRow& r) { return Number(TimeOr(r, r.stats.std), "%.3f"); }},
      {"min_us", [](const ResultRow& r) { return Number(TimeOr(r, r.stats.min), "%.3f"); }},
      {"max_us", [](const ResultRow& r) { return Number(TimeOr(r, r.stats.max), "%.3f"); }},
      {"stream_us", [](const ResultRow& r) { return Number(TimeOr(r, r.stream_us), "%.3f"); }},
      {"iterations", [](const ResultRow& r) { return HasTimes(r) ? std::to_string(r.stats.n) : std::string(); }},
      {"warmup", [](const ResultRow& r) { return HasTimes(r) ? std::to_string(r.warmup) : std::string(); }},
      {"mechanism", [](const ResultRow& r) { return r.mechanism; }},
      {"l2", [](const ResultRow& r) { return r.l2; }},
      {"bytes", [](const ResultRow& r) { return Number(r.bytes, "%.0f"); }},
      {"flops", [](const ResultRow& r) { return Number(r.flops, "%.0f"); }},
      {"gbps", [](const ResultRow& r) { return Number(AchievedGBps(r), "%.1f"); }},
      {"tflops", [](const ResultRow& r) { return Number(AchievedTFlops(r), "%.3f"); }},
      {"copy_gbps", [](const ResultRow& r) { return Number(r.copy_gbps, "%.1f"); }},
      {"pct_of_copy", [](const ResultRow& r) { return Number(PercentOfCopy(r), "%.1f"); }},
      {"read_gbps", [](const ResultRow& r) { return Number(r.read_gbps, "%.1f"); }},
      {"pct_of_read", [](const ResultRow& r) { return Number(PercentOfRead(r), "%.1f"); }},
      {"overhead_us", [](const ResultRow& r) { return Number(TimeOr(r, r.overhead_us), "%.3f"); }},
      {"kernels", [](const ResultRow& r) { return r.kernels; }},
      {"kernel_parts", [](const ResultRow& r) { return r.kernel_parts; }},
      {"message", [](const ResultRow& r) { return r.message; }},
      {"reproduce", [](const ResultRow& r) { return r.reproduce; }},
  };
  return kColumns;
}

}  // namespace

double AchievedGBps(const ResultRow& row) {
  return HasTimes(row) && row.stats.median > 0 ? row.bytes / (row.stats.median * 1e3) : NAN;
}

double AchievedTFlops(const ResultRow& row) {
  return HasTimes(row) && row.stats.median > 0 ? row.flops / (row.stats.median * 1e6) : NAN;
}

double PercentOfCopy(const ResultRow& row) {
  const double gbps = AchievedGBps(row);
  return std::isfinite(gbps) && row.copy_gbps > 0 ? 100.0 * gbps / row.copy_gbps : NAN;
}

double PercentOfRead(const ResultRow& row) {
  const double gbps = AchievedGBps(row);
  return std::isfinite(gbps) && row.read_gbps > 0 ? 100.0 * gbps / row.read_gbps : NAN;
}

nlohmann::json RowToJson(const ResultRow& r) {
  const bool t = HasTimes(r);
  return {
      {"routine", r.routine},
      {"backend", r.backend},
      {"label", r.label},
      {"shape", r.shape},
      {"dtype", r.dtype},
      {"arch", r.arch},
      {"gpu", r.gpu},
      {"status", r.status},
      {"refcheck", r.refcheck},
      {"refcheck_detail", r.refcheck_detail},
      {"max_abs_err", JsonNumber(r.max_abs_err)},
      {"median_us", JsonNumber(t ? r.stats.median : NAN)},
      {"std_us", JsonNumber(t ? r.stats.std : NAN)},
      {"min_us", JsonNumber(t ? r.stats.min : NAN)},
      {"max_us", JsonNumber(t ? r.stats.max : NAN)},
      {"stream_us", JsonNumber(t ? r.stream_us : NAN)},
      {"iterations", t ? nlohmann::json(r.stats.n) : nlohmann::json(nullptr)},
      {"warmup", t ? nlohmann::json(r.warmup) : nlohmann::json(nullptr)},
      {"mechanism", r.mechanism},
      {"l2", r.l2},
      {"bytes", JsonNumber(r.bytes)},
      {"flops", JsonNumber(r.flops)},
      {"gbps", JsonNumber(AchievedGBps(r))},
      {"tflops", JsonNumber(AchievedTFlops(r))},
      {"copy_gbps", JsonNumber(r.copy_gbps)},
      {"pct_of_copy", JsonNumber(PercentOfCopy(r))},
      {"read_gbps", JsonNumber(r.read_gbps)},
      {"pct_of_read", JsonNumber(PercentOfRead(r))},
      {"overhead_us", JsonNumber(t ? r.overhead_us : NAN)},
      {"kernels", r.kernels},
      {"kernel_parts", r.kernel_parts},
      {"message", r.message},
      {"reproduce", r.reproduce},
  };
}

std::string CsvHeader() {
  std::string out;
  for (const auto& c : Columns()) out += (out.empty() ? "" : ",") + std::string(c.name);
  return out;
}

std::string RowToCsv(const ResultRow& row) {
  std::string out;
  bool first = true;
  for (const auto& c : Columns()) {
    out += (first ? "" : ",") + CsvField(c.value(row));
    first = false;
  }
  return out;
}

std::string TableHeader() {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-20s %-16s %-5s %-26s %10s %8s %8s %6s %8s %6s  %-9s %s", "routine", "backend",
                "dtype", "shape", "median_us", "std_us", "min_us", "iters", "GB/s", "%copy", "refcheck", "mechanism");
  return buf;
}

std::string RowToTableLine(const ResultRow& r) {
  auto dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  const bool t = HasTimes(r);
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%-20s %-16s %-5s %-26s %10s %8s %8s %6s %8s %6s  %-9s %s", r.routine.c_str(),
                r.backend.c_str(), r.dtype.c_str(), r.shape.c_str(),
                dash(Number(t ? r.stats.median : NAN, "%.3f")).c_str(),
                dash(Number(t ? r.stats.std : NAN, "%.3f")).c_str(),
                dash(Number(t ? r.stats.min : NAN, "%.3f")).c_str(), t ? std::to_string(r.stats.n).c_str() : "-",
                dash(Number(AchievedGBps(r), "%.1f")).c_str(), dash(Number(PercentOfCopy(r), "%.1f")).c_str(),
                r.refcheck.c_str(), dash(r.mechanism).c_str());
  std::string line = buf;
  if (r.status != "ok") line += "  " + r.status + ": " + r.message;
  return line;
}

Status WriteRows(const std::string& path, const nlohmann::json& meta, const std::vector<ResultRow>& rows) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  std::string text;
  if (ends_with(".json")) {
    nlohmann::json doc = {{"meta", meta}, {"rows", nlohmann::json::array()}};
    for (const auto& r : rows) doc["rows"].push_back(RowToJson(r));
    text = doc.dump(2) + "\n";
  } else if (ends_with(".csv")) {
    text = CsvHeader() + "\n";
    for (const auto& r : rows) text += RowToCsv(r) + "\n";
  } else {
    return client::InvalidArgument("--out '" + path + "': the file name must end in .json or .csv");
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status(StatusCode::kInternal, "--out '" + path + "': cannot write the file");
  return OkStatus();
}

}  // namespace kiln::bench
