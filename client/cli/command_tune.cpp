// kiln tune ls | rm: the daemon's tuning store (TuningService; kilnd --tuning-store).
#include <grpcpp/grpcpp.h>

#include <ostream>

#include "client/cli/command.h"
#include "client/cli/output.h"
#include "client/core/rpc/daemon_connection.h"
#include "kiln/v1/tuning.grpc.pb.h"
#include "proto/tuning_checks.h"

namespace kiln::cli {
namespace {

// A usage error unless `problem` is empty (the daemon would refuse the same value).
void Require(const std::string& problem) {
  if (!problem.empty()) throw UsageError(problem);
}

// "NVIDIA H200, 132 SMs, driver 13000, NVRTC 13.0, Kiln 0.1.0, space 1"
std::string EnvironmentText(const v1::TuningEnvironment& e) {
  return e.gpu_name() + ", " + std::to_string(e.sm_count()) + " SMs, driver " + std::to_string(e.driver_version()) +
         ", NVRTC " + e.nvrtc_version() + ", Kiln " + e.kiln_version() + ", space " +
         std::to_string(e.tactic_space_version());
}

// "5/7": candidates that ran ok, of those tried ("-" when the record lists none).
std::string TriedText(const v1::TuningRecord& r) {
  if (r.candidates_size() == 0) return "-";
  int ok = 0;
  for (const auto& c : r.candidates()) ok += c.ok() ? 1 : 0;
  return std::to_string(ok) + "/" + std::to_string(r.candidates_size());
}

int RunLs(Invocation& inv) {
  v1::ListTuningsRequest request;
  if (inv.Has("--op")) {
    Require(proto::OpNameProblem("--op", inv.Get("--op")));
    request.set_op(inv.Get("--op"));
  }
  auto stub = v1::TuningService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::ListTuningsResponse reply;
  grpc::Status status = stub->ListTunings(&context, request, &reply);
  if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "ListTunings"));
  if (inv.Has("--json")) {
    inv.out << ToJson(reply) << std::endl;
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"OP", "BUCKET", "TACTIC", "MEDIAN", "TIMING", "OK/TRIED", "RECORDED", "ENVIRONMENT"}};
  for (const auto& r : reply.records())
    rows.push_back({r.op(), r.bucket(), r.tactic(), HumanMs(r.median_us() / 1000), r.timing(), TriedText(r),
                    HumanTime(r.recorded()), EnvironmentText(r.environment())});
  if (reply.records_size() > 0) PrintTable(inv.out, rows);
  inv.out << reply.records_size() << (reply.records_size() == 1 ? " tuning record" : " tuning records")
          << (request.op().empty() ? "" : " of op " + request.op()) << std::endl;
  return kExitOk;
}

int RunRm(Invocation& inv) {
  v1::DeleteTuningsRequest request;
  const bool all = inv.Has("--all");
  if (all && (inv.Has("--op") || inv.Has("--bucket")))
    throw UsageError("--all cannot be combined with --op or --bucket");
  if (!all && !inv.Has("--op")) throw UsageError("name what to remove: --op OP [--bucket B], or --all");
  if (inv.Has("--bucket") && !inv.Has("--op")) throw UsageError("--bucket needs --op");
  if (all) {
    request.set_all(true);
  } else {
    Require(proto::OpNameProblem("--op", inv.Get("--op")));
    request.set_op(inv.Get("--op"));
    if (inv.Has("--bucket")) {
      Require(proto::BucketProblem("--bucket", inv.Get("--bucket")));
      request.set_bucket(inv.Get("--bucket"));
    }
  }
  auto stub = v1::TuningService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::DeleteTuningsResponse reply;
  grpc::Status status = stub->DeleteTunings(&context, request, &reply);
  if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "DeleteTunings"));
  if (inv.Has("--json")) {
    inv.out << ToJson(reply) << std::endl;
    return kExitOk;
  }
  inv.out << "removed " << reply.deleted() << (reply.deleted() == 1 ? " tuning record" : " tuning records");
  if (!all) inv.out << " of op " << request.op() << (request.bucket().empty() ? "" : ", bucket " + request.bucket());
  inv.out << std::endl;
  return kExitOk;
}

}  // namespace

void AddTuneCommands(std::vector<CommandSpec>& commands) {
  const OptionSpec json = {"--json", "", "print the reply as proto3 JSON (the JSON names: medianUs, gpuName)"};
  commands.push_back({"tune ls",
                      "",
                      "list the daemon's tuning records, by op and bucket",
                      "A record is the tactic an autotuner chose for an op's shape bucket, with its time, every\n"
                      "candidate it tried and the environment it was measured in; it is reused only in an equal\n"
                      "environment. Needs a kilnd started with --tuning-store (FAILED_PRECONDITION otherwise).",
                      {{"--op", "OP", "only this op (e.g. gemm)"}, json},
                      0,
                      0,
                      RunLs});
  commands.push_back({"tune rm",
                      "",
                      "remove tuning records (of an op, of one of its buckets, or all)",
                      "--op, or --all, is required; the records of every environment go. Running processes\n"
                      "keep the tactics they already chose until they restart.",
                      {{"--op", "OP", "every record of this op"},
                       {"--bucket", "BUCKET", "only this shape bucket of --op"},
                       {"--all", "", "every record"},
                       json},
                      0,
                      0,
                      RunRm});
}

}  // namespace kiln::cli
