// kiln.v1.CacheService: list, inspect, evict and verify the on-disk cache; statistics.
#pragma once

#include "kiln/v1/cache.grpc.pb.h"
#include "server/engine/kernel_engine.h"

namespace kiln::server {

class CacheServiceImpl final : public v1::CacheService::Service {
 public:
  explicit CacheServiceImpl(KernelEngine* engine) : engine_(engine) {}

  grpc::Status ListEntries(grpc::ServerContext*, const v1::ListEntriesRequest*, v1::ListEntriesResponse*) override;
  grpc::Status GetEntry(grpc::ServerContext*, const v1::GetEntryRequest*, v1::CacheEntry*) override;
  grpc::Status EvictEntries(grpc::ServerContext*, const v1::EvictEntriesRequest*, v1::EvictEntriesResponse*) override;
  grpc::Status Verify(grpc::ServerContext*, const v1::VerifyRequest*, v1::VerifyResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const v1::GetStatsRequest*, v1::CacheStats*) override;

 private:
  // FAILED_PRECONDITION when the daemon runs with --no-cache.
  grpc::Status RequireCache() const;
  KernelEngine* engine_;
};

void EntryToProto(const cache::EntryRecord& record, const std::string& blob_path, v1::CacheEntry* out);

}  // namespace kiln::server
