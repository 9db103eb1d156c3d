#include "bench/op/kernel_parts.h"

#include <algorithm>
#include <cstdio>

#include "bench/op/timing_stats.h"

namespace kiln::bench {
namespace {

bool SameKernels(const std::vector<KernelSpan>& a, const std::vector<KernelSpan>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].name != b[k].name) return false;
  return true;
}

double Us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

std::string KernelParts(std::vector<std::vector<KernelSpan>> calls) {
  for (auto& call : calls)
    std::sort(call.begin(), call.end(), [](const KernelSpan& a, const KernelSpan& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
    });
  if (calls.empty() || calls[0].size() < 2) return "";
  const std::vector<KernelSpan>& shape = calls[0];
  std::vector<std::vector<double>> durations(shape.size()), gaps(shape.size());
  size_t matched = 0;
  for (const auto& call : calls) {
    if (!SameKernels(call, shape)) continue;
    ++matched;
    for (size_t k = 0; k < call.size(); ++k) {
      durations[k].push_back(Us(static_cast<int64_t>(call[k].end_ns - call[k].start_ns)));
      if (k > 0)
        gaps[k].push_back(Us(static_cast<int64_t>(call[k].start_ns) - static_cast<int64_t>(call[k - 1].end_ns)));
    }
  }
  std::string text;
  char number[32];
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k > 0) {
      std::snprintf(number, sizeof(number), " | %+.2f ", SummarizeTimes(gaps[k]).median);
      text += number;
    }
    std::snprintf(number, sizeof(number), " %.2f", SummarizeTimes(durations[k]).median);
    text += shape[k].name + number;
  }
  if (matched < calls.size())
    text += " (" + std::to_string(matched) + " of " + std::to_string(calls.size()) + " calls)";
  return text;
}

}  // namespace kiln::bench
