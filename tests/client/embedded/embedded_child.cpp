// kiln_embedded_child: one process of the embedded-engine tests (embedded_engine_test.cpp). It
// fetches one kernel (kiln::Prefetch: no GPU needed) from as many threads at once as asked,
// in whatever mode its environment gives it (KILN_MODE, KILN_SOCKET, KILN_CACHE_DIR, ...), and
// prints what each fetch got:
//   mode <kiln::DescribeMode()>
//   fetch <origin> <job id or -> <cache key> <cubin sha256>
//   error <status code> <message>
// Arguments:
//   --threads N          concurrent fetches (default 1)
//   --start-at-ms T      wait until this CLOCK_REALTIME time in ms, so processes start together
//   --again-after FILE   after the first round, wait for FILE to exist, then fetch once more
//   --op NAME [K=V...]   the op to fetch, or
//   --source FILE ENTRY  a raw source file and its entry
//   --arch ARCH          the target (default sm_90a)
// Exit 0 when every fetch succeeded, 1 otherwise, 2 for bad arguments.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "kiln/client.h"
#include "kiln/kernel.h"

namespace {

std::mutex out_mu;

void Say(const std::string& line) {
  std::lock_guard<std::mutex> lock(out_mu);
  std::cout << line << std::endl;
}

bool FetchOnce(const kiln::OpRequest* op, const kiln::SourceRequest* source, const std::string& arch) {
  auto info = op != nullptr ? kiln::Prefetch(*op, arch) : kiln::Prefetch(*source, arch);
  if (!info.ok()) {
    Say(std::string("error ") + kiln::StatusCodeName(info.status().code()) + " " + info.status().message());
    return false;
  }
  Say(std::string("fetch ") + kiln::OriginName(info->origin) + " " + (info->job_id.empty() ? "-" : info->job_id) + " " +
      info->cache_key + " " + info->sha256);
  return true;
}

int Usage(const std::string& why) {
  std::cerr << "kiln_embedded_child: " << why << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  long long start_at_ms = 0;
  std::string again_after, arch = "sm_90a";
  kiln::OpRequest op;
  kiln::SourceRequest source;
  bool have_op = false, have_source = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--threads") threads = std::stoi(next());
    else if (a == "--start-at-ms") start_at_ms = std::stoll(next());
    else if (a == "--again-after") again_after = next();
    else if (a == "--arch") arch = next();
    else if (a == "--op") {
      op.name = next();
      have_op = true;
      while (i + 1 < argc && std::string(argv[i + 1]).find('=') != std::string::npos) {
        const std::string kv = argv[++i];
        op.params[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
      }
    } else if (a == "--source") {
      std::ifstream in(next());
      std::stringstream text;
      text << in.rdbuf();
      source.name = "embedded_child";
      source.code = text.str();
      source.entries = {next()};
      have_source = !source.code.empty();
    } else {
      return Usage("unknown argument " + a);
    }
  }
  if (have_op == have_source) return Usage("name one kernel: --op NAME [K=V...] or --source FILE ENTRY");
  if (threads < 1) return Usage("--threads must be at least 1");

  Say("mode " + kiln::DescribeMode());
  if (start_at_ms > 0) {
    const auto at = std::chrono::system_clock::time_point(std::chrono::milliseconds(start_at_ms));
    std::this_thread::sleep_until(at);
  }
  const kiln::OpRequest* op_ptr = have_op ? &op : nullptr;
  const kiln::SourceRequest* source_ptr = have_source ? &source : nullptr;
  std::vector<std::thread> workers;
  std::vector<char> ok(threads, 0);
  for (int t = 0; t < threads; ++t) workers.emplace_back([&, t] { ok[t] = FetchOnce(op_ptr, source_ptr, arch); });
  for (auto& w : workers) w.join();
  bool all_ok = true;
  for (char o : ok) all_ok = all_ok && o;
  if (!again_after.empty()) {
    Say("waiting");
    struct stat st {};
    while (stat(again_after.c_str(), &st) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    all_ok = FetchOnce(op_ptr, source_ptr, arch) && all_ok;
  }
  return all_ok ? 0 : 1;
}
