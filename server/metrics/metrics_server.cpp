#include "server/metrics/metrics_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/metrics/metrics_text.h"

namespace kiln::server {

namespace {

MHD_Result Reply(MHD_Connection* connection, unsigned int code, const std::string& body, const char* type) {
  MHD_Response* response = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                           MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_Result result = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return result;
}

MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url, const char* method, const char*, const char*,
                  size_t* upload_size, void**) {
  const auto& render = *static_cast<const std::function<std::string()>*>(cls);
  constexpr const char* kText = "text/plain; charset=utf-8";
  if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0)
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics is served here\n", kText);
  if (*upload_size != 0) return MHD_NO;  // a GET with a body: not a scraper
  if (std::strcmp(url, "/metrics") != 0)
    return Reply(connection, MHD_HTTP_NOT_FOUND, "kilnd serves its metrics at /metrics\n", kText);
  return Reply(connection, MHD_HTTP_OK, render(), kMetricsContentType);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host_port,
                                                                    std::function<std::string()> render) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat("\"", host_port, "\" must be HOST:PORT"));
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("\"", host_port, "\": the host \"", host, "\" does not resolve (", gai_strerror(rc), ")"));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);

  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->render_ = std::move(render);
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
  if (found->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  uint16_t port_number = found->ai_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(found->ai_addr)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_port);
  server->daemon_ = MHD_start_daemon(flags, port_number, nullptr, nullptr, &Handle, &server->render_,
                                     MHD_OPTION_SOCK_ADDR, found->ai_addr,
                                     // A scraper that stops reading must not hold the thread.
                                     MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  if (server->daemon_ == nullptr)
    return absl::UnavailableError(absl::StrCat("could not listen on ", host_port,
                                               ": the port may be in use by another process or not be ours to bind"));
  const MHD_DaemonInfo* info = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->port_ = info != nullptr ? info->port : port_number;
  return server;
}

MetricsServer::~MetricsServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace kiln::server
