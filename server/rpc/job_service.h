// kiln.v1.JobService: the daemon's compile jobs, listed, fetched, or watched as they change.
#pragma once

#include "kiln/v1/job.grpc.pb.h"
#include "server/engine/kernel_engine.h"

namespace kiln::server {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  explicit JobServiceImpl(KernelEngine* engine) : engine_(engine) {}

  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::Status WatchJobs(grpc::ServerContext* context, const v1::WatchJobsRequest* request,
                         grpc::ServerWriter<v1::JobEvent>* writer) override;

 private:
  KernelEngine* engine_;
};

}  // namespace kiln::server
