#include "server/rpc/job_service.h"

#include "absl/strings/str_cat.h"
#include "proto/input_limits.h"
#include "server/rpc/request_limits.h"

namespace kiln::server {

int CapListedLogs(std::vector<v1::Job>& jobs, size_t budget) {
  size_t used = 0;
  int left_out = 0;
  for (auto& job : jobs) {
    if (job.log().empty()) continue;
    if (used + job.log().size() <= budget) {
      used += job.log().size();
      continue;
    }
    job.set_log(absl::StrCat("[log left out of this ListJobs reply (", job.log().size(),
                             " bytes; the reply already holds ", used, " bytes of logs): GetJob ", job.id(),
                             " returns it]"));
    ++left_out;
  }
  return left_out;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  if (request->limit() < 0 || request->limit() > 10000)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("limit ", request->limit(), " must be from 0 (default 100) to 10000"));
  if (!v1::JobState_IsValid(request->state()))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("unknown job state ", request->state()));
  size_t limit = request->limit() == 0 ? 100 : size_t(request->limit());
  auto jobs = engine_->jobs().List(request->state(), limit, request->include_log());
  CapListedLogs(jobs, kListJobsLogBudget);
  for (auto& job : jobs) *response->add_jobs() = std::move(job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*, const v1::GetJobRequest* request, v1::Job* response) {
  if (std::string problem = RequestLengthProblem(*request); !problem.empty())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, problem);
  if (request->id().empty())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "id is empty; ListJobs shows the ids");
  auto job = engine_->jobs().Get(request->id());
  if (!job)
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no job ", proto::QuoteInput(request->id()),
                                     " on this daemon (it keeps the last 1000 finished jobs; "
                                     "a job of another daemon sharing the cache is only known to that one)"));
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::WatchJobs(grpc::ServerContext* context, const v1::WatchJobsRequest* request,
                                       grpc::ServerWriter<v1::JobEvent>* writer) {
  // Count first, then check: two racing watchers cannot both take the last place.
  if (watchers_.fetch_add(1) >= max_watchers_) {
    watchers_.fetch_sub(1);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("kilnd already serves ", max_watchers_,
                                     " WatchJobs streams, its limit (--max-watchers); close one, or poll ListJobs"));
  }
  struct Release {
    std::atomic<int>& n;
    ~Release() { n.fetch_sub(1); }
  } release{watchers_};
  // Headers now, before any event: a client learns at once that its stream was taken.
  writer->SendInitialMetadata();
  auto watcher = engine_->jobs().Watch(request->include_existing());
  v1::JobEvent event;
  while (!context->IsCancelled()) {
    if (watcher->Next(event.mutable_job(), Clock::now() + std::chrono::milliseconds(200))) {
      event.mutable_job()->clear_log();  // logs are fetched with GetJob; events stay small
      if (!writer->Write(event)) break;
    } else if (watcher->closed()) {
      break;
    }
  }
  engine_->jobs().Unwatch(watcher);
  return grpc::Status::OK;
}

}  // namespace kiln::server
