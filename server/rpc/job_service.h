// kiln.v1.JobService: the daemon's compile jobs, listed, fetched, or watched as they change.
#pragma once

#include <atomic>

#include "kiln/v1/job.grpc.pb.h"
#include "server/engine/kernel_engine.h"

namespace kiln::server {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  // Each WatchJobs stream holds a server thread while open (the synchronous API), so at most
  // `max_watchers` are open at once; one more is refused RESOURCE_EXHAUSTED naming the cap.
  JobServiceImpl(KernelEngine* engine, int max_watchers) : engine_(engine), max_watchers_(max_watchers) {}

  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::Status WatchJobs(grpc::ServerContext* context, const v1::WatchJobsRequest* request,
                         grpc::ServerWriter<v1::JobEvent>* writer) override;

 private:
  KernelEngine* engine_;
  const int max_watchers_;
  std::atomic<int> watchers_{0};
};

}  // namespace kiln::server
