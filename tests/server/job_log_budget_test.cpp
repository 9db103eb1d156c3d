// ListJobs' log budget (server/rpc/job_service.h): a reply with logs stays far under gRPC's
// message limit however many jobs it lists.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "server/rpc/job_service.h"

namespace kiln::server {
namespace {

v1::Job JobWithLog(const std::string& id, size_t log_bytes) {
  v1::Job job;
  job.set_id(id);
  job.set_log(std::string(log_bytes, 'w'));
  return job;
}

TEST_CASE("ListJobs keeps the newest logs within its budget and names GetJob for the rest", "[jobs]") {
  std::vector<v1::Job> jobs = {JobWithLog("j1", 40), JobWithLog("j2", 0), JobWithLog("j3", 50), JobWithLog("j4", 10)};
  CHECK(CapListedLogs(jobs, 80) == 1);
  CHECK(jobs[0].log().size() == 40);
  CHECK(jobs[2].log() == "[log left out of this ListJobs reply (50 bytes; the reply already holds 40 bytes of "
                         "logs): GetJob j3 returns it]");
  CHECK(jobs[3].log().size() == 10);  // a smaller one later still fits
  CHECK(jobs[1].log().empty());

  // 10,000 jobs with 128 KiB logs (1.3 GB) become a reply of about the budget.
  std::vector<v1::Job> many(10000, JobWithLog("j", 128 << 10));
  CHECK(CapListedLogs(many, kListJobsLogBudget) == 10000 - 128);
  size_t total = 0;
  for (const auto& job : many) total += job.log().size();
  CHECK(total < kListJobsLogBudget + 10000 * 200);
}

}  // namespace
}  // namespace kiln::server
