// LocalFetchServer: kilnd's side of the same-node fetch (proto/local_fetch.h). UnixListener
// hands it each connection of its unix socket that opened with the protocol's magic; every
// connection gets a thread that answers GetKernel requests until the client closes it, through
// the same KernelServiceImpl::Serve as gRPC. Connections are few and long-lived (one or a few
// per client process, kept open), so a thread each is cheap, and bounded: past
// `max_connections` a new one is answered RESOURCE_EXHAUSTED and closed (the client then uses
// gRPC).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <set>

#include "server/metrics/rpc_latency.h"
#include "server/rpc/kernel_service.h"

namespace kiln::server {

class LocalFetchServer {
 public:
  // The label of its requests in RpcLatency (/metrics' kiln_rpc_duration_seconds).
  static constexpr const char* kMethod = "kiln.v1.KernelService/GetKernel:local";
  // How long a connection's thread polls for the next request after a reply before it sleeps:
  // a process loading its op set asks again within ~100 us of each answer (it verifies and
  // loads in between), and a thread that slept must be woken first (tens of microseconds on
  // an idle host). A connection that goes quiet costs this much CPU once.
  static constexpr std::chrono::microseconds kNextRequestSpin{250};

  LocalFetchServer(KernelServiceImpl* service, RpcLatency* latency, size_t max_connections = 256);
  // Closes every connection (a request being answered still gets its reply if it ends
  // before the socket is shut) and waits for their threads.
  ~LocalFetchServer();
  LocalFetchServer(const LocalFetchServer&) = delete;
  LocalFetchServer& operator=(const LocalFetchServer&) = delete;

  // Takes ownership of `fd`, a non-blocking connection whose magic has been read.
  void Serve(int fd);

  size_t open_connections() const;
  size_t refused() const;

 private:
  void Run(int fd);

  KernelServiceImpl* service_;
  RpcLatency* latency_;
  const size_t max_connections_;
  mutable std::mutex mu_;
  std::condition_variable done_;
  std::set<int> open_;  // the connections being served
  size_t refused_ = 0;
  bool stopping_ = false;
};

}  // namespace kiln::server
