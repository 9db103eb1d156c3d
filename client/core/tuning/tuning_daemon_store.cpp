#include "client/core/tuning/tuning_daemon_store.h"

#include <grpcpp/grpcpp.h>

#include "client/core/api/invalid_argument.h"
#include "kiln/v1/tuning.grpc.pb.h"
#include "proto/tuning_checks.h"
#include "proto/tuning_environment.h"

namespace kiln::client {
namespace {

constexpr auto kTimeout = std::chrono::seconds(10);

std::string KeyOf(const std::string& op, const std::string& bucket, const TuningEnvironment& e) {
  return op + '\n' + bucket + '\n' + proto::TuningEnvironmentKey(e);
}

}  // namespace

DaemonTuningStore::DaemonTuningStore(std::shared_ptr<const DaemonConnection> connection, std::string store_path,
                                     std::chrono::milliseconds miss_ttl)
    : connection_(std::move(connection)), store_path_(std::move(store_path)), miss_ttl_(miss_ttl) {}

std::string DaemonTuningStore::Describe() const {
  return "the tuning store " + store_path_ + " of kilnd at " + connection_->target();
}

StatusOr<TuningLookup> DaemonTuningStore::Lookup(const std::string& op, const std::string& bucket,
                                                 const TuningEnvironment& environment) {
  const std::string key = KeyOf(op, bucket, environment);
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = remembered_.find(key); it != remembered_.end()) {
      if (it->second.lookup.record || now - it->second.asked < miss_ttl_) return it->second.lookup;
    }
  }
  v1::LookupTuningRequest request;
  request.set_op(op);
  request.set_bucket(bucket);
  *request.mutable_environment() = environment;
  v1::LookupTuningResponse reply;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kTimeout);
  grpc::Status status = v1::TuningService::NewStub(connection_->channel())->LookupTuning(&context, request, &reply);
  TuningLookup lookup;
  if (status.ok()) {
    lookup.record = std::move(*reply.mutable_record());
  } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    const auto& trailers = context.GetServerTrailingMetadata();
    if (auto it = trailers.find(proto::kTuningMismatchMetadata); it != trailers.end())
      lookup.mismatch = std::string(it->second.data(), it->second.size());
  } else {
    return connection_->Explain(status, "LookupTuning " + op + " " + bucket);
  }
  std::lock_guard<std::mutex> lock(mu_);
  remembered_[key] = Remembered{lookup, now};
  return lookup;
}

Status DaemonTuningStore::Put(const TuningRecord& record) {
  // Checked here too, so the message is the same as the file store's and no RPC is wasted.
  if (auto p = proto::TuningRecordProblem("record", record); !p.empty()) return InvalidArgument(p);
  v1::PutTuningRequest request;
  *request.mutable_record() = record;
  v1::PutTuningResponse reply;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kTimeout);
  grpc::Status status = v1::TuningService::NewStub(connection_->channel())->PutTuning(&context, request, &reply);
  if (!status.ok()) return connection_->Explain(status, "PutTuning " + record.op() + " " + record.bucket());
  std::lock_guard<std::mutex> lock(mu_);
  remembered_[KeyOf(record.op(), record.bucket(), record.environment())] = Remembered{TuningLookup{record, ""},
                                                                                      std::chrono::steady_clock::now()};
  return OkStatus();
}

}  // namespace kiln::client
