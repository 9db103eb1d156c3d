// MetricsServer: kilnd's Prometheus endpoint (--metrics-listen HOST:PORT), a plain-HTTP
// GET /metrics served by libmicrohttpd on a thread of its own, apart from gRPC: scrapers speak
// HTTP/1.1, and a scrape must answer while every gRPC thread waits on compiles.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct MHD_Daemon;

namespace kiln::server {

class MetricsServer {
 public:
  // `render` is called on each scrape (on the server's thread) for the body. Fails, naming
  // `host_port`, when the host does not resolve or the port cannot be bound (in use).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host_port,
                                                              std::function<std::string()> render);
  ~MetricsServer();  // stops serving; waits for a scrape in progress
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }  // the bound port

 private:
  MetricsServer() = default;
  std::function<std::string()> render_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace kiln::server
