// The process-wide client settings and counters (kiln/client.h).
#include "kiln/client.h"
#include "client/core/api/invalid_argument.h"

#include <grpcpp/grpcpp.h>

#include "client/core/rpc/client_counters.h"
#include "client/core/rpc/client_settings.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "kiln/version.h"

namespace kiln {

Status Configure(const ClientOptions& options) {
  if (options.rpc_timeout.count() <= 0)
    return client::InvalidArgument("ClientOptions::rpc_timeout must be positive, got " +
                                   std::to_string(options.rpc_timeout.count()) + " ms");
  return client::ReplaceSettings(options);
}

ClientOptions CurrentOptions() { return client::CurrentSettings()->options; }

std::string DaemonTarget() { return client::CurrentSettings()->connection->target(); }

std::string DescribeMode() { return client::CurrentSettings()->source->Describe(); }

Status Ping(std::chrono::milliseconds timeout) {
  auto settings = client::CurrentSettings();
  auto stub = v1::CacheService::NewStub(settings->connection->channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::CacheStats stats;
  grpc::Status status = stub->GetStats(&context, v1::GetStatsRequest(), &stats);
  if (!status.ok()) return settings->connection->Explain(status, "ping (CacheService.GetStats)");
  return OkStatus();
}

ClientStats GetClientStats() {
  const client::ClientCounters& c = client::Counters();
  ClientStats s;
  s.get_kernel_rpcs = c.get_kernel_rpcs.load(std::memory_order_relaxed);
  s.rpc_failures = c.rpc_failures.load(std::memory_order_relaxed);
  s.modules_loaded = c.modules_loaded.load(std::memory_order_relaxed);
  s.blob_path_reads = c.blob_path_reads.load(std::memory_order_relaxed);
  s.op_fast_hits = client::OpFastHits::Sum();
  s.op_fast_misses = c.op_fast_misses.load(std::memory_order_relaxed);
  s.embedded_fetches = c.embedded_fetches.load(std::memory_order_relaxed);
  s.local_fetches = c.local_fetches.load(std::memory_order_relaxed);
  return s;
}

const char* Version() { return KILN_VERSION_STRING; }

}  // namespace kiln
