// kiln.v1.JobService: the daemon's compile jobs, listed, fetched, or watched as they change.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "kiln/v1/job.grpc.pb.h"
#include "server/engine/kernel_engine.h"

namespace kiln::server {

// ListJobs with include_log: the logs a reply carries, at most (each log is up to 128 KiB, so
// 10,000 jobs would pass gRPC's message limit); later jobs' logs are left out with a note.
inline constexpr size_t kListJobsLogBudget = 16u << 20;

// Clears the logs of `jobs` past `budget` bytes in all (newest first keep theirs), each replaced
// by a line naming GetJob. Returns how many were left out.
int CapListedLogs(std::vector<v1::Job>& jobs, size_t budget);

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
