#include "server/rpc/tuning_service.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "proto/tuning_checks.h"
#include "proto/tuning_environment.h"
#include "server/rpc/grpc_status.h"

namespace kiln::server {
namespace {

// INVALID_ARGUMENT with `problem` unless it is empty.
grpc::Status Check(const std::string& problem) {
  if (problem.empty()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, problem);
}

// Every request first: fields this daemon does not know are refused, not dropped silently (a
// newer client would think they were kept).
grpc::Status CheckKnown(const google::protobuf::Message& request) {
  return Check(proto::UnknownFieldsProblem("request", request));
}

}  // namespace

grpc::Status TuningServiceImpl::RequireStore() const {
  if (store_ != nullptr) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "this daemon runs without a tuning store (kilnd --tuning-store PATH / KILN_TUNING_STORE): "
                      "tuning results are not kept; start kilnd with one, or give clients KILN_TUNING_FILE");
}

grpc::Status TuningServiceImpl::PutTuning(grpc::ServerContext*, const v1::PutTuningRequest* request,
                                          v1::PutTuningResponse* response) {
  if (auto s = RequireStore(); !s.ok()) return s;
  if (auto s = CheckKnown(*request); !s.ok()) return s;
  if (!request->has_record()) return Check("record is missing");
  if (auto s = Check(proto::TuningRecordProblem("record", request->record())); !s.ok()) return s;
  auto replaced = store_->Put(request->record());
  if (!replaced.ok()) return ToGrpc(replaced.status());
  const v1::TuningRecord& r = request->record();
  spdlog::info("tuning store: {} {} {} -> {} ({:.2f} us, {}){}", r.op(), r.bucket(), r.environment().gpu_name(),
               r.tactic(), r.median_us(), r.timing(), *replaced ? ", replacing the previous record" : "");
  response->set_replaced(*replaced);
  return grpc::Status::OK;
}

grpc::Status TuningServiceImpl::LookupTuning(grpc::ServerContext* context, const v1::LookupTuningRequest* request,
                                             v1::LookupTuningResponse* response) {
  if (auto s = RequireStore(); !s.ok()) return s;
  if (auto s = CheckKnown(*request); !s.ok()) return s;
  if (auto s = Check(proto::OpNameProblem("op", request->op())); !s.ok()) return s;
  if (auto s = Check(proto::BucketProblem("bucket", request->bucket())); !s.ok()) return s;
  if (!request->has_environment()) return Check("environment is missing: a record is reused only where it matches");
  if (auto s = Check(proto::TuningEnvironmentProblem("environment", request->environment())); !s.ok()) return s;
  auto found = store_->Find(request->op(), request->bucket());
  if (!found.ok()) return ToGrpc(found.status());
  const std::string wanted = proto::TuningEnvironmentKey(request->environment());
  std::vector<v1::TuningEnvironment> others;
  for (v1::TuningRecord& r : *found) {
    if (proto::TuningEnvironmentKey(r.environment()) == wanted) {
      *response->mutable_record() = std::move(r);
      return grpc::Status::OK;
    }
    others.push_back(r.environment());
  }
  std::string message = absl::StrCat("no tuning record of ", request->op(), " for bucket ", request->bucket(),
                                     " in this environment");
  if (!others.empty()) {
    const std::string mismatch = proto::DescribeTuningMismatch(others, request->environment());
    absl::StrAppend(&message, "; ", mismatch);
    context->AddTrailingMetadata(proto::kTuningMismatchMetadata, mismatch);
  }
  return grpc::Status(grpc::StatusCode::NOT_FOUND, message);
}

grpc::Status TuningServiceImpl::ListTunings(grpc::ServerContext*, const v1::ListTuningsRequest* request,
                                            v1::ListTuningsResponse* response) {
  if (auto s = RequireStore(); !s.ok()) return s;
  if (auto s = CheckKnown(*request); !s.ok()) return s;
  if (!request->op().empty())
    if (auto s = Check(proto::OpNameProblem("op", request->op())); !s.ok()) return s;
  auto records = store_->List(request->op());
  if (!records.ok()) return ToGrpc(records.status());
  for (auto& r : *records) *response->add_records() = std::move(r);
  return grpc::Status::OK;
}

grpc::Status TuningServiceImpl::DeleteTunings(grpc::ServerContext*, const v1::DeleteTuningsRequest* request,
                                              v1::DeleteTuningsResponse* response) {
  if (auto s = RequireStore(); !s.ok()) return s;
  if (auto s = CheckKnown(*request); !s.ok()) return s;
  if (request->all() && (!request->op().empty() || !request->bucket().empty()))
    return Check("all: true cannot be combined with op or bucket");
  if (!request->all()) {
    if (request->op().empty())
      return Check("name what to delete: op (and optionally bucket), or set all: true to empty the store");
    if (auto s = Check(proto::OpNameProblem("op", request->op())); !s.ok()) return s;
    if (!request->bucket().empty())
      if (auto s = Check(proto::BucketProblem("bucket", request->bucket())); !s.ok()) return s;
  }
  auto deleted = store_->Delete(request->op(), request->bucket());
  if (!deleted.ok()) return ToGrpc(deleted.status());
  spdlog::info("tuning store: deleted {} record(s) ({})", *deleted,
               request->all() ? std::string("all")
                              : absl::StrCat("op ", request->op(),
                                             request->bucket().empty() ? "" : ", bucket " + request->bucket()));
  response->set_deleted(*deleted);
  return grpc::Status::OK;
}

grpc::Status TuningServiceImpl::ListBlockedTactics(grpc::ServerContext*, const v1::ListBlockedTacticsRequest* request,
                                                   v1::ListBlockedTacticsResponse* response) {
  if (auto s = CheckKnown(*request); !s.ok()) return s;
  if (!request->op().empty())
    if (auto s = Check(proto::OpNameProblem("op", request->op())); !s.ok()) return s;
  for (const v1::BlockedTactic& b : blocked_)
    if (request->op().empty() || b.op() == request->op()) *response->add_blocked() = b;
  response->set_blocklist_path(blocklist_path_);
  return grpc::Status::OK;
}

grpc::Status TuningServiceImpl::GetTuningInfo(grpc::ServerContext*, const v1::GetTuningInfoRequest* request,
                                              v1::TuningInfo* response) {
  if (auto s = CheckKnown(*request); !s.ok()) return s;
  if (store_ != nullptr) {
    auto count = store_->Count();
    if (!count.ok()) return ToGrpc(count.status());
    response->set_store_path(store_->path());
    response->set_records(*count);
  }
  response->set_blocklist_path(blocklist_path_);
  response->set_blocked(static_cast<uint32_t>(blocked_.size()));
  response->set_nvrtc_version(toolchain_.nvrtc);
  response->set_kiln_version(toolchain_.kiln);
  return grpc::Status::OK;
}

}  // namespace kiln::server
