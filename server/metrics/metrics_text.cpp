#include "server/metrics/metrics_text.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

// Numbers as Prometheus writes them: integers without a fraction, "+Inf" for infinity.
std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  // The shortest text that reads back as the same double: 0.1, not 0.10000000000000001.
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

void Header(std::string* out, const std::string& name, const char* type, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void Sample(std::string* out, const std::string& name, const std::string& labels, const std::string& value) {
  absl::StrAppend(out, name, labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ", value, "\n");
}

std::string Label(const char* name, const std::string& value) {
  return absl::StrCat(name, "=\"", EscapeLabelValue(value), "\"");
}

void Single(std::string* out, const std::string& name, const char* type, const char* help, const std::string& value) {
  Header(out, name, type, help);
  Sample(out, name, "", value);
}

// One histogram's samples: cumulative buckets (the format's "le" buckets count every value at or
// below the bound), then _sum and _count. `labels` are the series' own, before "le".
void HistogramSamples(std::string* out, const std::string& name, const std::string& labels,
                      const HistogramSnapshot& h) {
  std::string prefix = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    double bound = i < h.bounds.size() ? h.bounds[i] : INFINITY;
    Sample(out, name + "_bucket", prefix + Label("le", Number(bound)), std::to_string(cumulative));
  }
  Sample(out, name + "_sum", labels, Number(h.sum));
  Sample(out, name + "_count", labels, std::to_string(h.count));
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string RenderMetricsText(const MetricsSnapshot& s) {
  std::string out;
  Header(&out, "kiln_build_info", "gauge", "Always 1; the labels name this kilnd's version and its NVRTC.");
  Sample(&out, "kiln_build_info", absl::StrCat(Label("version", s.version), ",", Label("nvrtc", s.nvrtc)), "1");

  Header(&out, "kiln_cache_hits_total", "counter",
         "Kernel requests answered without compiling, by the tier that answered.");
  for (const auto& [tier, n] : s.hits_by_tier)
    Sample(&out, "kiln_cache_hits_total", Label("tier", tier), std::to_string(n));
  Single(&out, "kiln_cache_misses_total", "counter", "Kernel requests no tier could answer (compiled, or refused).",
         std::to_string(s.misses));
  Single(&out, "kiln_compiles_total", "counter", "NVRTC compiles started.", std::to_string(s.compiles));
  Single(&out, "kiln_compile_failures_total", "counter",
         "Compile jobs that failed (a compile error, a lock or deadline, a source that could not be written).",
         std::to_string(s.compile_failures));
  Header(&out, "kiln_compile_seconds", "histogram", "Time of successful compiles: NVRTC plus nvJitLink.");
  HistogramSamples(&out, "kiln_compile_seconds", "", s.compile_seconds);
  Single(&out, "kiln_compile_jobs_queued", "gauge", "Compile jobs waiting for a slot or for memory.",
         std::to_string(s.jobs_queued));
  Single(&out, "kiln_compile_jobs_running", "gauge", "Compile jobs running.", std::to_string(s.jobs_running));
  Single(&out, "kiln_memory_cache_entries", "gauge", "Kernels held in the daemon's memory cache.",
         std::to_string(s.memory_entries));

  if (s.cache_enabled) {
    Single(&out, "kiln_cache_entries", "gauge", "Entries in the disk cache's index.", std::to_string(s.cache_entries));
    Single(&out, "kiln_cache_bytes", "gauge", "Bytes of cubins in the disk cache.", std::to_string(s.cache_bytes));
    Single(&out, "kiln_cache_max_bytes", "gauge", "The disk cache's size limit (--cache-max-mb); 0: none.",
           std::to_string(s.cache_max_bytes));
    Single(&out, "kiln_cache_evictions_total", "counter", "Disk cache entries evicted to stay under the limit.",
           std::to_string(s.cache_evictions));
    Single(&out, "kiln_cache_quarantined_total", "counter",
           "Disk cache blobs that failed their checksum and were quarantined.", std::to_string(s.cache_quarantined));
  }
  if (!s.rejected_by_tier.empty()) {
    Header(&out, "kiln_tier_rejected_total", "counter",
           "Artifacts a tier offered that failed its checks and were refused, by tier.");
    for (const auto& [tier, n] : s.rejected_by_tier)
      Sample(&out, "kiln_tier_rejected_total", Label("tier", tier), std::to_string(n));
  }

  Header(&out, "kiln_rpc_duration_seconds", "histogram", "gRPC calls served, by method: time from start to status.");
  for (const auto& [method, h] : s.rpc_seconds)
    HistogramSamples(&out, "kiln_rpc_duration_seconds", Label("method", method), h);
  return out;
}

}  // namespace kiln::server
