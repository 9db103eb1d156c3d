#include "server/tiers/http_fetch.h"

#include <curl/curl.h>

#include <mutex>
#include <thread>

namespace kiln::server {
namespace {

struct Sink {
  std::string* body;
  uint64_t max_bytes;
  bool too_large = false;
};

size_t Write(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->body->size() + n > sink->max_bytes) {
    sink->too_large = true;
    return 0;  // aborts the transfer
  }
  sink->body->append(data, n);
  return n;
}

}  // namespace

HttpResult HttpGet(const std::string& url, const HttpOptions& options) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpResult result;
  result.attempts = 1;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    result.error = "libcurl could not make a handle";
    result.transient = true;
    return result;
  }
  char error[CURL_ERROR_SIZE] = {0};
  Sink sink{&result.body, options.max_bytes};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options.timeout.count()));
  // A stall: under 1 byte/s for stall_timeout (whole seconds, at least 1).
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   std::max<long>(1, static_cast<long>(options.stall_timeout.count() / 1000)));
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options.max_bytes));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "kilnd");
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
  curl_easy_cleanup(curl);

  if (code != CURLE_OK) {
    result.body.clear();
    if (sink.too_large || code == CURLE_FILESIZE_EXCEEDED) {
      result.error = "the body is larger than " + std::to_string(options.max_bytes) + " bytes";
      return result;
    }
    result.error = std::string(curl_easy_strerror(code)) + (error[0] ? std::string(": ") + error : "");
    // A truncated body, a timeout or stall, a refused or reset connection: worth another try.
    result.transient = code == CURLE_OPERATION_TIMEDOUT || code == CURLE_PARTIAL_FILE ||
                       code == CURLE_COULDNT_CONNECT || code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR ||
                       code == CURLE_GOT_NOTHING || code == CURLE_COULDNT_RESOLVE_HOST;
    return result;
  }
  if (result.status >= 400) {
    result.body.clear();
    result.error = "HTTP " + std::to_string(result.status);
    result.transient = result.status >= 500 || result.status == 429;
    return result;
  }
  result.ok = true;
  return result;
}

HttpResult HttpGetWithRetries(const std::string& url, const HttpOptions& options, int retries,
                              std::chrono::milliseconds backoff, const std::function<bool()>& stop) {
  HttpResult result;
  for (int attempt = 0;; ++attempt) {
    result = HttpGet(url, options);
    result.attempts = attempt + 1;
    if (result.ok || !result.transient || attempt >= retries || (stop && stop())) return result;
    std::this_thread::sleep_for(backoff * (1 << std::min(attempt, 10)));
  }
}

}  // namespace kiln::server
