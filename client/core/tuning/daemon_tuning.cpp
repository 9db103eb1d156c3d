#include "client/core/tuning/daemon_tuning.h"

#include <map>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "client/core/rpc/client_settings.h"
#include "client/core/rpc/embedded_fetch.h"
#include "kiln/v1/tuning.grpc.pb.h"

namespace kiln::client {
namespace {

constexpr auto kTimeout = std::chrono::seconds(10);

}  // namespace

StatusOr<DaemonTuning> AskDaemonTuning(const DaemonConnection& connection) {
  auto stub = v1::TuningService::NewStub(connection.channel());
  DaemonTuning out;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kTimeout);
    grpc::Status status = stub->GetTuningInfo(&context, v1::GetTuningInfoRequest(), &out.info);
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      out.has_service = false;
      return out;
    }
    if (!status.ok()) return connection.Explain(status, "GetTuningInfo");
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kTimeout);
  v1::ListBlockedTacticsResponse blocked;
  grpc::Status status = stub->ListBlockedTactics(&context, v1::ListBlockedTacticsRequest(), &blocked);
  if (!status.ok()) return connection.Explain(status, "ListBlockedTactics");
  out.blocked.assign(blocked.blocked().begin(), blocked.blocked().end());
  return out;
}

StatusOr<std::shared_ptr<const DaemonTuning>> GetDaemonTuning() {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const DaemonTuning>> known;
  const std::shared_ptr<const Settings> settings = CurrentSettings();
  const std::shared_ptr<const DaemonConnection> connection = settings->connection;
  KILN_ASSIGN_OR_RETURN(bool embedded, settings->source->UseEmbedded());
  const std::string key = embedded ? "embedded" : connection->target();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  DaemonTuning asked;
  if (embedded) {
    KILN_ASSIGN_OR_RETURN(std::string nvrtc, EmbeddedNvrtcVersion());
    asked.info.set_nvrtc_version(nvrtc);
  } else {
    KILN_ASSIGN_OR_RETURN(asked, AskDaemonTuning(*connection));
  }
  auto shared = std::make_shared<const DaemonTuning>(std::move(asked));
  std::lock_guard<std::mutex> lock(mu);
  return known.emplace(key, shared).first->second;
}

}  // namespace kiln::client
