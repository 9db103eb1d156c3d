#include "client/cli/spec_batch.h"

#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <mutex>
#include <ostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "client/core/rpc/client_identity.h"
#include "client/core/rpc/cubin_fetch.h"
#include "proto/origin_word.h"

namespace kiln::cli {
namespace {

// The bar on a terminal: redrawn in place on stderr.
void DrawBar(std::ostream& err, int done, int total, const SpecBatchSummary& s, const std::string& last) {
  constexpr int kWidth = 30;
  const int filled = total == 0 ? kWidth : done * kWidth / total;
  err << "\r[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] " << done << "/" << total;
  for (const auto& [origin, n] : s.by_origin) err << " " << origin << " " << n;
  if (s.failed > 0) err << " FAILED " << s.failed;
  err << "  " << last.substr(0, 40) << "\x1b[K" << std::flush;
}

nlohmann::json LineOf(const SpecResult& r, int done, int total) {
  nlohmann::json line;
  line["op"] = r.target->entry->op;
  line["params"] = r.target->entry->params;
  line["arch"] = r.target->arch;
  line["ok"] = r.ok;
  if (r.ok) {
    line["uri"] = r.reply.uri();
    line["cache_key"] = r.reply.cache_key();
    line["origin"] = proto::OriginWord(r.reply.origin());
    if (!r.reply.job_id().empty()) line["job_id"] = r.reply.job_id();
  } else {
    line["error"] = r.error;
  }
  line["ms"] = static_cast<int64_t>(r.ms + 0.5);
  line["done"] = done;
  line["total"] = total;
  line["source"] = r.target->entry->source;
  return line;
}

}  // namespace

std::vector<OptionSpec> SpecBatchOptions() {
  return {
      {"--arch", "\"ARCH...\"", "target archs, e.g. \"sm_80 sm_90a\" (replace the list's @ARCH targets)", true},
      {"--jobs", "N", "requests in flight at most (default 4; the daemon bounds its compiles itself)"},
  };
}

std::vector<std::string> ArchListOption(const Invocation& inv) {
  std::vector<std::string> archs;
  if (!inv.Has("--arch")) return archs;
  for (const auto& value : inv.All("--arch")) {
    std::string word;
    std::istringstream in(value);
    for (std::string part; std::getline(in, part, ' ');) {
      std::istringstream commas(part);
      for (std::string a; std::getline(commas, a, ',');)
        if (!a.empty()) archs.push_back(a);
    }
  }
  if (archs.empty()) throw UsageError("--arch is empty; name archs like \"sm_80 sm_90a\"");
  return archs;
}

int JobsOption(const Invocation& inv) {
  if (!inv.Has("--jobs")) return 4;
  const std::string text = inv.Get("--jobs");
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > 64)
    throw UsageError("--jobs wants an integer from 1 to 64, got '" + text + "'");
  return value;
}

LoadedSpecs LoadSpecTargets(const std::string& path, const std::vector<std::string>& archs) {
  LoadedSpecs loaded;
  loaded.list = proto::ReadSpecList(path);
  if (!loaded.list.error.empty()) throw UsageError(loaded.list.error);
  if (loaded.list.entries.empty()) throw UsageError("the spec list " + path + " names no spec");
  auto expanded = proto::ExpandSpecTargets(loaded.list.entries, archs, "--arch");
  if (!expanded.error.empty()) throw UsageError(expanded.error);
  loaded.targets = std::move(expanded.targets);
  return loaded;
}

std::string SpecBatchSummary::Text() const {
  std::string text = std::to_string(total) + " specs:";
  bool first = true;
  for (const auto& [origin, n] : by_origin) {
    text += (first ? " " : ", ") + std::to_string(n) + " " + origin;
    first = false;
  }
  return text + (first ? " none served" : "") + "; " + std::to_string(failed) + " failed";
}

SpecBatchSummary RunSpecBatch(Invocation& inv, const std::vector<proto::SpecTarget>& targets, int jobs,
                              const std::function<void(const SpecResult&)>& on_result) {
  const client::DaemonConnection& connection = inv.Connection();  // made once, before the workers
  const bool terminal = isatty(STDERR_FILENO) == 1;
  client::FetchOptions options;
  options.timeout = inv.timeout;
  options.prefer_blob_path = true;
  options.client_id = "kiln-cli:" + client::DefaultClientId();

  SpecBatchSummary summary;
  summary.total = static_cast<int>(targets.size());
  std::mutex mu;  // the summary and the display
  std::atomic<size_t> next{0};
  int done = 0;
  auto worker = [&] {
    for (size_t i = next++; i < targets.size(); i = next++) {
      const proto::SpecTarget& target = targets[i];
      SpecResult result;
      result.target = &target;
      v1::GetKernelRequest request;
      *request.mutable_op() = target.Request();
      request.mutable_target()->set_arch(target.arch);
      const auto start = std::chrono::steady_clock::now();
      auto fetched = client::FetchCubin(connection, request, options);
      result.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (fetched.ok()) {
        result.ok = true;
        result.reply = std::move(fetched->reply);
        result.cubin = std::move(fetched->cubin);
      } else {
        result.error = fetched.status().message();
      }
      if (result.ok && on_result) {
        try {
          on_result(result);
        } catch (const std::exception& e) {
          result.ok = false;
          result.error = e.what();
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      if (result.ok) {
        summary.by_origin[proto::OriginWord(result.reply.origin())]++;
      } else {
        summary.failed++;
      }
      if (terminal) {
        DrawBar(inv.err, done, summary.total, summary, result.ok ? result.reply.uri() : "failed: " + target.entry->op);
        if (!result.ok)
          inv.err << "\r\x1b[K" << target.entry->source << ": " << target.entry->op << " for " << target.arch << ": "
                  << result.error << "\n";
      } else {
        inv.out << LineOf(result, done, summary.total).dump() << std::endl;
      }
    }
  };
  std::vector<std::thread> threads;
  const int n = std::max(1, std::min<int>(jobs, static_cast<int>(targets.size())));
  for (int t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (terminal) inv.err << "\n";
  return summary;
}

}  // namespace kiln::cli
