// kilnd: the per-node Kiln daemon. Serves KernelService, CacheService, JobService and
// TuningService (plus health and reflection) on a unix socket, and optionally on TCP.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "server/config/daemon_config.h"
#include "server/config/engine_options_from_config.h"
#include "server/daemon/local_fetch_server.h"
#include "server/daemon/open_file_limit.h"
#include "server/daemon/service_manager.h"
#include "server/daemon/socket_guard.h"
#include "server/daemon/tcp_credentials.h"
#include "server/daemon/unix_listener.h"
#include "server/daemon/warm_up.h"
#include "server/engine/kernel_engine.h"
#include "server/jit/toolchain.h"
#include "server/metrics/metrics_collect.h"
#include "server/metrics/metrics_server.h"
#include "server/metrics/rpc_latency.h"
#include "server/rpc/cache_service.h"
#include "server/rpc/health_service.h"
#include "server/rpc/job_service.h"
#include "server/rpc/kernel_service.h"
#include "server/rpc/parse_error_interceptor.h"
#include "server/rpc/path_redaction.h"
#include "server/rpc/tuning_service.h"
#include "server/tuning/tuning_store.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitStartup = 1;
// Each synchronous RPC in progress holds a server thread (a WatchJobs stream for as long as it
// is open): past this many, gRPC answers RESOURCE_EXHAUSTED instead of starting more threads.
// It stays above --max-watchers' largest value, so watchers alone never take the last thread.
constexpr int kMaxServerThreads = 2048;
// Streams one connection may have open at once; more wait for one to end.
constexpr int kMaxStreamsPerConnection = 1024;

int Serve(const kiln::server::DaemonConfig& config, sigset_t signals,
          const std::optional<kiln::server::InheritedSocket>& inherited) {
  using namespace kiln::server;
  // An inherited socket gets the same lock: a second kilnd on its path is refused either way.
  auto guard = inherited ? SocketGuard::ClaimInherited(config.socket) : SocketGuard::Claim(config.socket);
  if (!guard.ok()) {
    spdlog::critical("{}", std::string(guard.status().message()));
    return kExitStartup;
  }
  auto engine = KernelEngine::Create(EngineOptionsFromConfig(config));
  if (!engine.ok()) {
    spdlog::critical("{}", std::string(engine.status().message()));
    return kExitStartup;
  }
  std::unique_ptr<TuningStore> tuning_store;
  if (!config.tuning_store.empty()) {
    auto opened = TuningStore::Open(config.tuning_store);
    if (!opened.ok()) {
      spdlog::critical("--tuning-store: {}", std::string(opened.status().message()));
      return kExitStartup;
    }
    tuning_store = std::move(*opened);
  }
  // Before gRPC serves: a bad --metrics-listen stops kilnd before any client sees it up.
  RpcLatency rpc_latency;
  std::unique_ptr<MetricsServer> metrics;
  if (!config.metrics_listen.empty()) {
    auto started = MetricsServer::Start(config.metrics_listen, [&engine, &rpc_latency] {
      return RenderMetricsText(CollectMetrics(**engine, rpc_latency));
    });
    if (!started.ok()) {
      spdlog::critical("--metrics-listen: {}", std::string(started.status().message()));
      return kExitStartup;
    }
    metrics = std::move(*started);
    spdlog::info("Prometheus metrics at http://{}/metrics", config.metrics_listen);
  }
  KernelServiceImpl kernel_service(engine->get());
  // The same-node fetch (proto/local_fetch.h) on the unix socket, beside gRPC.
  auto local_fetch = std::make_unique<LocalFetchServer>(&kernel_service, &rpc_latency);
  CacheServiceImpl cache_service(engine->get());
  JobServiceImpl job_service(engine->get(), config.max_watchers);
  HealthServiceImpl health_service;
  TuningServiceImpl tuning_service(tuning_store.get(), config.tactic_blocklist, config.blocked_tactics,
                                   (*engine)->toolchain());

  // Our own grpc.health.v1 service: reflection can describe it (the built-in one it cannot).
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC turns SO_REUSEPORT on by default: a second daemon would share our TCP port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  {  // every call's latency, by method, for /metrics
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
    // First, so the latency figures count an unparseable request as INVALID_ARGUMENT too.
    interceptors.push_back(ParseErrorInterceptorFactory());
    interceptors.push_back(rpc_latency.InterceptorFactory());
    // Last: what a TCP peer is sent names none of kilnd's folders and files (path_redaction.h).
    std::vector<ServerPath> server_paths = {{config.cache_dir, "<cache-dir>"},
                                            {config.gen_dir, "<gen-dir>"},
                                            {config.kernels_dir, "<kernels-dir>"},
                                            {config.cuda_home, "<cuda-home>"},
                                            {config.socket, "<socket>"},
                                            {config.tuning_store, "<tuning-store>"},
                                            {config.tactic_blocklist, "<tactic-blocklist>"},
                                            {config.warm_list, "<warm-list>"},
                                            {config.tls_cert, "<tls-cert>"},
                                            {config.tls_key, "<tls-key>"},
                                            {config.tls_client_ca, "<tls-client-ca>"}};
    for (const auto& dir : config.prebuilt_dirs) server_paths.push_back({dir, "<prebuilt>"});
    interceptors.push_back(
        PathRedactionInterceptorFactory(std::make_shared<const PathRedactor>(std::move(server_paths))));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  // kilnd accepts on its unix socket itself (unix_listener.h: gRPC's own listener stops for good
  // at the open-file limit) and hands each connection to gRPC.
  auto unix_listener = inherited ? UnixListener::Adopt(inherited->fd, inherited->path)
                                 : UnixListener::Listen(config.socket);
  if (!unix_listener.ok()) {
    spdlog::critical("could not listen on {}: {}", config.socket, std::string(unix_listener.status().message()));
    return kExitStartup;
  }
  grpc::ResourceQuota quota("kilnd");
  quota.SetMaxThreads(kMaxServerThreads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  int tcp_port = 0;
  // The unix socket needs no TLS (its file permissions protect it); TCP gets TLS unless
  // --insecure asked for plaintext (config/tcp_security.h).
  if (!config.listen.empty()) builder.AddListeningPort(config.listen, TcpServerCredentials(config), &tcp_port);
  builder.RegisterService(&kernel_service);
  builder.RegisterService(&cache_service);
  builder.RegisterService(&job_service);
  builder.RegisterService(&tuning_service);
  builder.RegisterService(&health_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || (!config.listen.empty() && tcp_port == 0)) {
    spdlog::critical("could not listen on {}{}: the address may be in use by another process (a second kilnd?) "
                     "or not be ours to bind{}",
                     config.socket, config.listen.empty() ? "" : " and " + config.listen,
                     config.listen.empty() || config.insecure
                         ? ""
                         : absl::StrCat(", or the TLS certificate ", config.tls_cert, " and key ", config.tls_key,
                                        " are not a valid pair (the key must be the certificate's own)"));
    return kExitStartup;
  }
  (*unix_listener)->Start(server.get(), local_fetch.get(), [&health_service](bool accepting) {
    health_service.SetAccepting(accepting);
  });
  if (auto s = (*guard)->SetSocketPermissions(); !s.ok()) spdlog::warn("{}", std::string(s.message()));
  if (!config.listen.empty()) {
    if (config.insecure)
      spdlog::warn("TCP {} is plaintext and unauthenticated (--insecure): anyone who reaches it may compile, read "
                   "and evict the cache; use --tls-cert/--tls-key outside a trusted network",
                   config.listen);
    else spdlog::info("TCP {}: {}", config.listen, DescribeTcpSecurity(config));
  }

  const auto& tc = (*engine)->toolchain();
  spdlog::info("kilnd {} serving on {}{} (pid {}); cache {}{}, generated sources {}, kernels {}; "
               "NVRTC {}, nvJitLink {}, CUDA headers {}; JIT {}; up to {} compiles within {} MB",
               tc.kiln, config.socket, config.listen.empty() ? "" : " and " + config.listen, getpid(), config.cache_dir,
               config.no_cache ? " (disabled: --no-cache)" : "", config.gen_dir, config.kernels_dir, tc.nvrtc,
               tc.nvjitlink, tc.cuda_headers, config.disable_jit ? "disabled" : "enabled", config.max_jobs,
               config.compile_memory_mb);
  if (inherited) spdlog::info("the unix socket {} is systemd's (socket activation)", config.socket);
  spdlog::info("tuning store {}; tactic blocklist {}",
               config.tuning_store.empty() ? std::string("off (results are not kept)") : config.tuning_store,
               config.tactic_blocklist.empty()
                   ? std::string("off")
                   : absl::StrCat(config.tactic_blocklist, " (", config.blocked_tactics.size(), " entries)"));

  std::unique_ptr<WarmUp> warm_up;
  if (!config.warm_list.empty())
    warm_up = std::make_unique<WarmUp>(engine->get(), config.warm_list, config.warm_specs, config.arch_list,
                                       std::min(config.max_jobs, 8));

  // Startup work (cache recovery in KernelEngine::Create, listeners) is done: a Type=notify unit
  // starts what depends on kilnd from here. Warm-up runs on while kilnd serves.
  NotifyReady(absl::StrCat("serving on ", config.socket, config.listen.empty() ? "" : " and " + config.listen));

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("{} received: shutting down (running compiles get {} s to finish)", strsignal(sig),
               config.shutdown_grace_s);
  NotifyStopping(absl::StrCat("stopping: running compiles get ", config.shutdown_grace_s, " s to finish"));
  auto grace = std::chrono::seconds(config.shutdown_grace_s);
  auto deadline = std::chrono::system_clock::now() + grace;
  health_service.Shutdown();
  unix_listener->reset();  // no new connections; those open get their answers
  (*engine)->BeginShutdown();
  if (warm_up) warm_up->Stop();  // its requests end now: no new compiles are taken
  // Requests waiting on running compiles get their answers until the grace period ends.
  server->Shutdown(deadline);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::system_clock::now());
  bool idle = (*engine)->FinishShutdown(std::max(left, std::chrono::milliseconds(0)));
  if (!idle) {
    // NVRTC cannot be interrupted: leave now. Commits are atomic, so nothing is half written.
    spdlog::warn("compiles still running after the grace period are abandoned");
    guard->reset();
    spdlog::shutdown();
    std::_Exit(0);
  }
  server->Wait();
  local_fetch.reset();  // its connections close; a request still running has had its grace
  metrics.reset();      // its scrapes read the engine
  engine->reset();
  guard->reset();
  spdlog::info("kilnd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << kiln::server::UsageText();
      return 0;
    }
    if (a == "--print-flag-table") {  // regenerates the table in docs/configuration.md
      std::cout << kiln::server::FlagTableMarkdown();
      return 0;
    }
    if (a == "--version") {
      std::cout << "kilnd " << kiln::server::KilnVersion() << "\n";
      return 0;
    }
  }
  auto logger = spdlog::stderr_color_mt("kilnd");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  auto config = kiln::server::LoadDaemonConfig(args);
  if (!config.ok()) {
    std::cerr << "kilnd: " << config.status().message() << "\n";
    return kExitUsage;
  }
  // systemd's socket (deploy/kilnd.socket), when it passed one: checked before anything starts.
  auto inherited = kiln::server::TakeInheritedSocket();
  if (!inherited.ok()) {
    std::cerr << "kilnd: " << inherited.status().message() << "\n";
    return kExitUsage;
  }
  if (*inherited && (*inherited)->path != config->socket) {
    std::cerr << "kilnd: systemd passed the socket " << (*inherited)->path << " (kilnd.socket's ListenStream=), but "
              << "kilnd is set to serve " << config->socket << " (--socket or KILN_SOCKET); make them the same path\n";
    return kExitUsage;
  }
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  spdlog::flush_on(spdlog::level::info);
  // Every connection holds a file descriptor: take all the hard limit allows (open_file_limit.h).
  auto files = kiln::server::RaiseOpenFileLimit();
  if (!files.problem.empty())
    spdlog::warn("open-file limit stays {} (hard {}): {}", files.soft, files.hard, files.problem);
  else spdlog::info("open-file limit {} (hard {}); each client connection holds one", files.soft, files.hard);

  // Block the stop signals before any thread starts, so only sigwait sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return Serve(*config, signals, *inherited);
}
