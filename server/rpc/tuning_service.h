// kiln.v1.TuningService: the tuning store (kilnd --tuning-store) and the tactic blocklist
// (kilnd --tactic-blocklist). Without a store, every store RPC is FAILED_PRECONDITION; the
// blocklist and GetTuningInfo answer either way.
#pragma once

#include <string>
#include <vector>

#include "kiln/v1/tuning.grpc.pb.h"
#include "server/jit/toolchain.h"
#include "server/tuning/tuning_store.h"

namespace kiln::server {

class TuningServiceImpl final : public v1::TuningService::Service {
 public:
  // `store` may be null (no --tuning-store); it must outlive the service.
  TuningServiceImpl(TuningStore* store, std::string blocklist_path, std::vector<v1::BlockedTactic> blocked,
                    Toolchain toolchain)
      : store_(store),
        blocklist_path_(std::move(blocklist_path)),
        blocked_(std::move(blocked)),
        toolchain_(std::move(toolchain)) {}

  grpc::Status PutTuning(grpc::ServerContext*, const v1::PutTuningRequest*, v1::PutTuningResponse*) override;
  grpc::Status LookupTuning(grpc::ServerContext*, const v1::LookupTuningRequest*, v1::LookupTuningResponse*) override;
  grpc::Status ListTunings(grpc::ServerContext*, const v1::ListTuningsRequest*, v1::ListTuningsResponse*) override;
  grpc::Status DeleteTunings(grpc::ServerContext*, const v1::DeleteTuningsRequest*,
                             v1::DeleteTuningsResponse*) override;
  grpc::Status ListBlockedTactics(grpc::ServerContext*, const v1::ListBlockedTacticsRequest*,
                                  v1::ListBlockedTacticsResponse*) override;
  grpc::Status GetTuningInfo(grpc::ServerContext*, const v1::GetTuningInfoRequest*, v1::TuningInfo*) override;

 private:
  grpc::Status RequireStore() const;

  TuningStore* store_;
  std::string blocklist_path_;
  std::vector<v1::BlockedTactic> blocked_;
  Toolchain toolchain_;
};

}  // namespace kiln::server
