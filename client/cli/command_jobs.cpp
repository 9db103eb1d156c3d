// kiln jobs ls | watch: the daemon's compile jobs (JobService).
#include <pthread.h>
#include <signal.h>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <mutex>
#include <ostream>
#include <thread>

#include "client/cli/command.h"
#include "client/cli/output.h"
#include "client/core/rpc/daemon_connection.h"
#include "kiln/v1/job.grpc.pb.h"

namespace kiln::cli {
namespace {

// "queued", "QUEUED" or "JOB_STATE_QUEUED"; "waiting" for WAITING_FOR_LOCK.
v1::JobState ParseState(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (text == "WAITING") text = "WAITING_FOR_LOCK";
  if (text.rfind("JOB_STATE_", 0) != 0) text = "JOB_STATE_" + text;
  v1::JobState state;
  if (!v1::JobState_Parse(text, &state) || state == v1::JOB_STATE_UNSPECIFIED)
    throw UsageError("--state wants one of queued, waiting, compiling, succeeded, failed, "
                     "abandoned, reused");
  return state;
}

std::string StateText(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  if (name.rfind("JOB_STATE_", 0) == 0) name = name.substr(10);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string FirstLine(const std::string& text, size_t max) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > max ? line.substr(0, max - 3) + "..." : line;
}

int RunLs(Invocation& inv) {
  v1::ListJobsRequest request;
  if (inv.Has("--state")) request.set_state(ParseState(inv.Get("--state")));
  if (inv.Has("--limit")) {
    const std::string text = inv.Get("--limit");
    int limit = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), limit);
    if (ec != std::errc() || end != text.data() + text.size() || limit < 1)
      throw UsageError("--limit wants a positive integer, got '" + text + "'");
    request.set_limit(limit);
  }
  request.set_include_log(inv.Has("--log"));
  auto stub = v1::JobService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::ListJobsResponse r;
  grpc::Status status = stub->ListJobs(&context, request, &r);
  if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "ListJobs"));
  if (inv.Has("--json")) {
    inv.out << ToJson(r) << std::endl;
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "STATE", "URI", "ARCH", "TOTAL", "CREATED", "ERROR"}};
  for (const auto& j : r.jobs())
    rows.push_back({j.id(), StateText(j.state()), j.uri(), j.arch(),
                    j.timings().total_ms() > 0 ? HumanMs(j.timings().total_ms()) : "-", HumanTime(j.created()),
                    FirstLine(j.error(), 60)});
  if (r.jobs_size() > 0) PrintTable(inv.out, rows);
  inv.out << r.jobs_size() << " job(s)" << std::endl;
  if (inv.Has("--log"))
    for (const auto& j : r.jobs())
      if (!j.log().empty()) inv.out << "\n--- log of job " << j.id() << " ---\n" << j.log() << "\n";
  return kExitOk;
}

int RunGet(Invocation& inv) {
  v1::GetJobRequest request;
  request.set_id(inv.positionals()[0]);
  auto stub = v1::JobService::NewStub(inv.Connection().channel());
  grpc::ClientContext context;
  context.set_deadline(inv.Deadline());
  v1::Job j;
  grpc::Status status = stub->GetJob(&context, request, &j);
  if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "GetJob " + request.id()));
  if (inv.Has("--json")) {
    inv.out << ToJson(j) << std::endl;
    return kExitOk;
  }
  const v1::JobTimings& t = j.timings();
  std::vector<std::vector<std::string>> rows = {
      {"job", j.id() + (j.daemon().empty() ? "" : " (daemon " + j.daemon() + ")")},
      {"state", StateText(j.state())},
      {"uri", j.uri()},
      {"key", j.cache_key()},
      {"arch", j.arch()},
      {"created", HumanTime(j.created())},
      {"finished", HumanTime(j.finished())},
      {"timings", "total " + HumanMs(t.total_ms()) + " (queue " + HumanMs(t.queue_ms()) + ", lock " +
                      HumanMs(t.lock_ms()) + ", compile " + HumanMs(t.compile_ms()) + ", link " + HumanMs(t.link_ms()) +
                      ", commit " + HumanMs(t.commit_ms()) + ")"},
  };
  if (!j.error().empty()) rows.push_back({"error", j.error()});
  for (int i = 0; i < j.waiters_size(); ++i) rows.push_back({i == 0 ? "waiters" : "", j.waiters(i).client()});
  const v1::Manifest& m = j.manifest();
  std::string options;
  for (const auto& o : m.options()) options += (options.empty() ? "" : " ") + o;
  if (!options.empty()) rows.push_back({"options", options});
  for (int i = 0; i < m.sources_size(); ++i)
    rows.push_back({i == 0 ? "sources" : "", m.sources(i).name() + "  " + m.sources(i).origin() + "  " +
                                                 m.sources(i).sha256().substr(0, 12) + "  " +
                                                 HumanBytes(m.sources(i).size_bytes())});
  if (!m.generated_dir().empty()) rows.push_back({"generated", m.generated_dir()});
  PrintTable(inv.out, rows);
  if (!j.log().empty()) inv.out << "\n--- log ---\n" << j.log() << (j.log().back() == '\n' ? "" : "\n");
  inv.out << std::flush;
  return kExitOk;
}

std::string EventLine(const v1::Job& j) {
  std::string line = HumanTime(j.finished().seconds() ? j.finished() : j.created()) + "  job " + j.id() + "  " +
                     StateText(j.state()) + "  " + j.uri() + " " + j.arch();
  if (j.timings().total_ms() > 0) line += "  " + HumanMs(j.timings().total_ms());
  if (!j.error().empty()) line += "  " + FirstLine(j.error(), 100);
  return line;
}

int RunWatch(Invocation& inv) {
  // SIGINT / SIGTERM end the watch cleanly: blocked here, before gRPC starts its threads, and
  // taken by one thread that cancels the stream.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto stub = v1::JobService::NewStub(inv.Connection().channel());
  {
    // A daemon that is not there is exit 3, before anything is watched.
    grpc::ClientContext context;
    context.set_deadline(inv.Deadline());
    v1::ListJobsRequest probe;
    probe.set_limit(1);
    v1::ListJobsResponse ignored;
    grpc::Status status = stub->ListJobs(&context, probe, &ignored);
    if (!status.ok()) return inv.Fail(inv.Connection().Explain(status, "WatchJobs"));
  }
  // Shared with the signal thread, which may outlive this function (it waits until exit).
  struct Cancel {
    std::mutex mu;
    grpc::ClientContext* context = nullptr;
    bool interrupted = false;
  };
  static auto* cancel = new Cancel();
  grpc::ClientContext context;
  {
    std::lock_guard<std::mutex> lock(cancel->mu);
    cancel->context = &context;
  }
  std::thread([signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::lock_guard<std::mutex> lock(cancel->mu);
    cancel->interrupted = true;
    if (cancel->context != nullptr) cancel->context->TryCancel();
  }).detach();

  v1::WatchJobsRequest request;
  request.set_include_existing(inv.Has("--existing"));
  auto reader = stub->WatchJobs(&context, request);
  if (!inv.Has("--json"))
    inv.err << "watching the jobs of kilnd at " << inv.Connection().target() << " (Ctrl-C to stop)" << std::endl;
  v1::JobEvent event;
  while (reader->Read(&event)) {
    if (inv.Has("--json")) inv.out << ToJsonLine(event) << std::endl;
    else inv.out << EventLine(event.job()) << std::endl;
  }
  grpc::Status status = reader->Finish();
  bool interrupted = false;
  {
    std::lock_guard<std::mutex> lock(cancel->mu);
    cancel->context = nullptr;
    interrupted = cancel->interrupted;
  }
  if (interrupted) return kExitOk;
  if (status.ok() || status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::CANCELLED) {
    inv.err << "kilnd closed the stream (" << (status.ok() ? "it is shutting down" : status.error_message()) << ")"
            << std::endl;
    return kExitOk;
  }
  return inv.Fail(inv.Connection().Explain(status, "WatchJobs"));
}

}  // namespace

void AddJobsCommands(std::vector<CommandSpec>& commands) {
  const OptionSpec json = {"--json", "", "print proto3 JSON (the JSON names: jobId, cacheKey)"};
  commands.push_back(
      {"jobs ls",
       "",
       "list compile jobs, newest first",
       "",
       {{"--state", "STATE", "only jobs in STATE: queued, waiting, compiling, succeeded, failed, abandoned, reused"},
        {"--limit", "N", "at most N jobs (default: the daemon's, 100)"},
        {"--log", "", "include each job's compiler log"},
        json},
       0,
       0,
       RunLs});
  commands.push_back(
      {"jobs get", "ID", "one job: manifest, timings, waiters and its compiler log", "", {json}, 1, 1, RunGet});
  commands.push_back({"jobs watch",
                      "",
                      "follow compile jobs as they change, until Ctrl-C",
                      "One line per change (one JSON object per line with --json). Ends with exit code 0 on\n"
                      "Ctrl-C or SIGTERM, and when the daemon shuts down.",
                      {{"--existing", "", "first show every job still queued or running"}, json},
                      0,
                      0,
                      RunWatch});
}

}  // namespace kiln::cli
