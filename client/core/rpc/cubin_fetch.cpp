#include "client/core/rpc/cubin_fetch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "client/core/rpc/client_counters.h"
#include "client/core/rpc/client_settings.h"
#include "client/core/rpc/embedded_fetch.h"
#include "client/core/rpc/kernel_rpc.h"
#include "client/core/rpc/sha256.h"

namespace kiln::client {
namespace {

StatusOr<std::string> ReadBlob(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(StatusCode::kNotFound, "cannot open " + path + ": " + std::strerror(errno));
  std::string bytes;
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status error(StatusCode::kDataLoss, "cannot read " + path + ": " + std::strerror(errno));
      close(fd);
      return error;
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return bytes;
}

// OK when `bytes` are what the reply promised.
Status Verify(const v1::GetKernelResponse& reply, const std::string& bytes, const std::string& where) {
  if (reply.sha256().empty())
    return Status(StatusCode::kDataLoss, "the daemon sent no SHA-256 for " + reply.uri() + " (key " +
                                             reply.cache_key() + "); refusing to load");
  if (bytes.empty())
    return Status(StatusCode::kDataLoss, "the cubin of " + reply.uri() + " from " + where + " is empty");
  const std::string actual = Sha256Hex(bytes);
  if (actual != reply.sha256())
    return Status(StatusCode::kDataLoss, "checksum mismatch for the cubin of " + reply.uri() + " (key " +
                                             reply.cache_key() + ") from " + where + ": expected sha256 " +
                                             reply.sha256() + ", got " + actual + " over " +
                                             std::to_string(bytes.size()) + " bytes");
  return OkStatus();
}

// The fetch itself, filling `fetched` (its timings too).
Status Fetch(const DaemonConnection& connection, v1::GetKernelRequest request, const FetchOptions& options,
             FetchedCubin& fetched) {
  request.set_client_id(options.client_id);
  request.set_prefer_blob_path(options.prefer_blob_path && connection.is_local());
  auto t = std::chrono::steady_clock::now();
  auto ms_since = [](std::chrono::steady_clock::time_point from) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - from).count();
  };
  auto reply = CallGetKernel(connection, request, options.timeout);
  fetched.rpc_ms = ms_since(t);
  if (!reply.ok()) return reply.status();

  if (!reply->blob_path().empty()) {
    t = std::chrono::steady_clock::now();
    auto bytes = ReadBlob(reply->blob_path());
    Status good = bytes.ok() ? Verify(*reply, *bytes, reply->blob_path()) : bytes.status();
    fetched.verify_ms = ms_since(t);
    if (good.ok()) {
      Bump(Counters().blob_path_reads);
      fetched.blob_path = reply->blob_path();
      fetched.cubin = std::move(bytes).value();
      fetched.reply = std::move(reply).value();
      return OkStatus();
    }
    // The file went away (evicted between reply and read) or is damaged: ask for the bytes.
    request.set_prefer_blob_path(false);
    t = std::chrono::steady_clock::now();
    reply = CallGetKernel(connection, request, options.timeout);
    fetched.rpc_ms += ms_since(t);
    if (!reply.ok()) return reply.status().WithContext("after the blob file failed (" + good.message() + ")");
    if (!reply->blob_path().empty() && reply->cubin().empty())
      return Status(StatusCode::kInternal,
                    "the daemon sent a blob path although the bytes were asked for (" + DescribeRequest(request) + ")");
  }
  fetched.cubin = std::move(*reply->mutable_cubin());
  reply->clear_cubin();
  t = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(Verify(*reply, fetched.cubin, "the daemon's reply"));
  fetched.verify_ms += ms_since(t);
  fetched.reply = std::move(reply).value();
  return OkStatus();
}

}  // namespace

StatusOr<FetchedCubin> FetchCubin(const DaemonConnection& connection, v1::GetKernelRequest request,
                                  const FetchOptions& options) {
  FetchedCubin fetched;
  KILN_RETURN_IF_ERROR(Fetch(connection, request, options, fetched));
  return fetched;
}

StatusOr<FetchedCubin> FetchCubin(const v1::GetKernelRequest& request) {
  auto settings = CurrentSettings();
  FetchOptions options;
  options.timeout = settings->options.rpc_timeout;
  options.prefer_blob_path = settings->options.prefer_blob_path;
  options.client_id = settings->client_id;
  KILN_ASSIGN_OR_RETURN(bool embedded, settings->source->UseEmbedded());
  if (embedded) return EmbeddedFetch(request, options);
  return FetchCubin(*settings->connection, request, options);
}

}  // namespace kiln::client
