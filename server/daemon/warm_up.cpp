#include "server/daemon/warm_up.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/origin_word.h"

namespace kiln::server {
namespace {

std::string ParamsText(const std::map<std::string, std::string>& params) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : params) parts.push_back(absl::StrCat(k, "=", v));
  return absl::StrJoin(parts, " ");
}

}  // namespace

WarmUp::WarmUp(KernelEngine* engine, std::string list, std::vector<proto::SpecListEntry> entries,
               std::vector<std::string> archs, int threads)
    : engine_(engine), list_(std::move(list)), entries_(std::move(entries)) {
  targets_ = proto::ExpandSpecTargets(entries_, archs, "--arch").targets;
  start_ = std::chrono::steady_clock::now();
  spdlog::info("warm-up from {}: {} specs on {} threads", list_, targets_.size(), threads);
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(targets_.size())));
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
}

WarmUp::~WarmUp() { Stop(); }

void WarmUp::Stop() {
  stop_ = true;
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void WarmUp::Work() {
  for (size_t i = next_++; i < targets_.size() && !stop_; i = next_++) {
    const proto::SpecTarget& target = targets_[i];
    KernelQuery query;
    query.op = target.entry->op;
    query.params = target.entry->params;
    query.target_arch = target.arch;
    query.client = absl::StrCat("kilnd --warm ", list_);
    const auto t0 = std::chrono::steady_clock::now();
    auto served = engine_->GetKernel(query, std::chrono::steady_clock::time_point::max(),
                                     [this] { return stop_.load(); });
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const size_t done = ++done_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (served.ok()) {
        by_origin_[proto::OriginWord(served->origin)]++;
      } else {
        failed_++;
      }
    }
    if (served.ok()) {
      spdlog::info("warm-up {}/{}: {} for {}: {} ({:.0f} ms)", done, targets_.size(), served->artifact->uri,
                   target.arch, proto::OriginWord(served->origin), ms);
    } else {
      spdlog::warn("warm-up {}/{}: {} {} for {} ({}) FAILED: {}", done, targets_.size(), target.entry->op,
                   ParamsText(target.entry->params), target.arch, target.entry->source,
                   std::string(served.status().message()));
    }
    if (done == targets_.size()) {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<std::string> parts;
      for (const auto& [origin, count] : by_origin_) parts.push_back(absl::StrCat(count, " ", origin));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      const std::string text = absl::StrCat("warm-up from ", list_, " done in ",
                                            static_cast<long long>(s * 10 + 0.5) / 10.0, " s: ", targets_.size(),
                                            " specs: ", parts.empty() ? "none served" : absl::StrJoin(parts, ", "),
                                            "; ", failed_, " failed");
      if (failed_ > 0) {
        spdlog::warn("{} (each failure is logged above)", text);
      } else {
        spdlog::info("{}", text);
      }
    }
  }
}

}  // namespace kiln::server
