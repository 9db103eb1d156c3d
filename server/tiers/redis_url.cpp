#include "server/tiers/redis_url.h"

#include <charconv>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

bool ParseNumber(const std::string& text, int min, int max, int* out) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max) return false;
  *out = v;
  return true;
}

}  // namespace

std::string RedisUrl::str() const { return absl::StrCat("redis://", host, ":", port, "/", db); }

std::string ParseRedisUrl(const std::string& url, RedisUrl* out) {
  constexpr std::string_view kScheme = "redis://";
  if (url.rfind("rediss://", 0) == 0) return "uses TLS (rediss://), which kilnd does not speak; use redis://HOST:PORT";
  if (url.rfind(kScheme, 0) != 0) return "must be a redis://HOST:PORT[/DB] URL";
  std::string rest = url.substr(kScheme.size());
  if (rest.find_first_of(" \t\n") != std::string::npos) return "holds a space";
  if (rest.find('@') != std::string::npos)
    return "holds credentials (user:password@), which kilnd does not send; reach Redis over a trusted network";
  RedisUrl parsed;
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty() && !ParseNumber(db, 0, 1023, &parsed.db))
      return absl::StrCat("names the database \"", db, "\"; it must be a number from 0 to 1023");
  }
  if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    std::string port = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (!ParseNumber(port, 1, 65535, &parsed.port))
      return absl::StrCat("names the port \"", port, "\"; it must be a number from 1 to 65535");
  }
  if (rest.empty()) return "names no host; use redis://HOST:PORT[/DB]";
  if (rest.find_first_of("[]/?#") != std::string::npos)
    return absl::StrCat("names the host \"", rest, "\", which is not a host name or IPv4 address");
  parsed.host = rest;
  *out = parsed;
  return "";
}

}  // namespace kiln::server
