// server/rpc/path_redaction.h: which text is a server path, and every string field of a reply.
#include "server/rpc/path_redaction.h"

#include <catch2/catch.hpp>

#include "kiln/v1/cache.pb.h"
#include "kiln/v1/job.pb.h"

namespace kiln::server {
namespace {

PathRedactor Redactor() {
  return PathRedactor({{"/var/cache/kiln", "<cache-dir>"},
                       {"/var/cache/kiln/generated/", "<gen-dir>"},
                       {"relative/path", "<never>"},
                       {"", "<never>"},
                       {"/", "<never>"}});
}

TEST_CASE("a server path is redacted as a whole name or a folder prefix and nowhere else", "[path_redaction]") {
  const PathRedactor r = Redactor();
  CHECK(r.Redact("/var/cache/kiln") == "<cache-dir>");
  CHECK(r.Redact("blob /var/cache/kiln/blobs/ab/abcd (read-only)") == "blob <cache-dir>/blobs/ab/abcd (read-only)");
  CHECK(r.Redact("in (/var/cache/kiln): no space") == "in (<cache-dir>): no space");
  // A folder inside another keeps its own placeholder (longest first).
  CHECK(r.Redact("/var/cache/kiln/generated/rmsnorm/x.cu:3: error") == "<gen-dir>/rmsnorm/x.cu:3: error");
  // Another name that starts alike is not the path.
  CHECK(r.Redact("/var/cache/kiln2/x and /var/cache/kiln.old") == "/var/cache/kiln2/x and /var/cache/kiln.old");
  CHECK(r.Redact("relative/path and / stay") == "relative/path and / stay");
  CHECK(r.Redact("/var/cache/kiln /var/cache/kiln") == "<cache-dir> <cache-dir>");
}

TEST_CASE("every string field of a reply is redacted, nested and repeated ones too, bytes are not",
          "[path_redaction]") {
  const PathRedactor r = Redactor();
  v1::ListEntriesResponse list;
  auto* e = list.add_entries();
  e->set_blob_path("/var/cache/kiln/blobs/ab/abcd");
  e->set_uri("rmsnorm_bf16_h4096");
  list.add_entries()->set_blob_path("/var/cache/kiln/blobs/cd/cdef");
  r.RedactMessage(&list);
  CHECK(list.entries(0).blob_path() == "<cache-dir>/blobs/ab/abcd");
  CHECK(list.entries(0).uri() == "rmsnorm_bf16_h4096");
  CHECK(list.entries(1).blob_path() == "<cache-dir>/blobs/cd/cdef");

  v1::Job job;
  job.mutable_manifest()->set_generated_dir("/var/cache/kiln/generated/j1");
  job.set_log("/var/cache/kiln/generated/j1/k.cu(3): error: identifier is undefined");
  r.RedactMessage(&job);
  CHECK(job.manifest().generated_dir() == "<gen-dir>/j1");
  CHECK(job.log() == "<gen-dir>/j1/k.cu(3): error: identifier is undefined");
}

TEST_CASE("a unix-socket peer is local and a TCP one is not", "[path_redaction]") {
  CHECK(IsLocalPeer("unix:/run/kiln/kilnd.sock"));
  CHECK(IsLocalPeer("fd:12"));
  CHECK_FALSE(IsLocalPeer("ipv4:127.0.0.1:40000"));
  CHECK_FALSE(IsLocalPeer("ipv6:[::1]:40000"));
}

}  // namespace
}  // namespace kiln::server
