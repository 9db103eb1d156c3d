/* The C ABI's common part: the status every kiln_* function returns, the thread-local error
 * message, the version and the daemon connection. Each op family declares its C functions in
 * its own header (kiln/ops/<family>.h, C and C++ alike); kiln/kiln.h includes them all.
 *
 * Every function returning kiln_status sets a thread-local message on failure, read with
 * kiln_last_error(), and clears it on success. No function throws or aborts. */
#ifndef KILN_C_ABI_H_
#define KILN_C_ABI_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/export.h"
#include "kiln/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The same numbers as kiln::StatusCode. */
typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* a bad tensor or value; nothing was launched */
  KILN_ERROR_NOT_FOUND = 2,
  KILN_ERROR_FAILED_PRECONDITION = 3, /* e.g. the op cannot be built for this GPU */
  KILN_ERROR_UNAVAILABLE = 4,         /* the daemon kilnd cannot be reached */
  KILN_ERROR_DEADLINE_EXCEEDED = 5,
  KILN_ERROR_DATA_LOSS = 6, /* a cubin failed its checksum */
  KILN_ERROR_NO_DRIVER = 7, /* no CUDA driver or no GPU */
  KILN_ERROR_CUDA = 8,      /* a CUDA driver call failed */
  KILN_ERROR_INTERNAL = 9,
  KILN_ERROR_UNIMPLEMENTED = 10,
  KILN_ERROR_RESOURCE_EXHAUSTED = 11,
  KILN_ERROR_PERMISSION_DENIED = 12,
  KILN_ERROR_UNKNOWN = 13
} kiln_status;

/* The message of this thread's last failed call ("" when the last call succeeded).
 * Valid until the next kiln_* call on this thread. */
KILN_API const char* kiln_last_error(void);

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_STATUS" for numbers outside the enum. */
KILN_API const char* kiln_status_name(kiln_status status);

/* The library's version, "MAJOR.MINOR.PATCH"; compare with KILN_VERSION_STRING. */
KILN_API const char* kiln_version(void);

/* Chooses the daemon for later requests: a unix socket path or a gRPC target
 * ("unix:/path", "host:port"); NULL or "" goes back to KILN_SOCKET / the default socket.
 * Kernels already loaded stay loaded. */
KILN_API kiln_status kiln_set_socket(const char* socket);

/* kiln_set_socket(socket), then checks that the daemon answers within timeout_ms
 * (<= 0: 5000). KILN_ERROR_UNAVAILABLE names the socket and how to start kilnd. */
KILN_API kiln_status kiln_connect(const char* socket, int timeout_ms);

/* Where later kernel requests go: "auto" (the daemon when one listens at the unix socket, else
 * the embedded engine compiling in this process), "daemon" or "embedded"; NULL or "" goes back
 * to KILN_MODE (kiln::ClientOptions::mode). Another word is KILN_ERROR_INVALID_ARGUMENT and
 * changes nothing. */
KILN_API kiln_status kiln_set_mode(const char* mode);

/* Which mode kernel requests use and why, deciding it now if no request has
 * (kiln::DescribeMode). Valid until the next kiln_describe_mode call on this thread. */
KILN_API const char* kiln_describe_mode(void);

/* Fetches an op's cubin for an explicit arch ("sm_90a") without loading it: no GPU or driver
 * needed (kiln::Prefetch). It warms the daemon's cache, or in embedded mode this process's
 * cache folder. params: the op's "KEY=VALUE" words separated by spaces ("dtype=bf16
 * hidden=4096"; `kiln ops OP` lists them). On success *summary (when summary is not NULL)
 * points at "uri=... arch=... origin=... key=... sha256=... bytes=..." (origin: memory, disk,
 * prebuilt, compiled, repository or remote), valid until the next kiln_prefetch call on this
 * thread. A malformed word is KILN_ERROR_INVALID_ARGUMENT naming it. */
KILN_API kiln_status kiln_prefetch(const char* op, const char* params, const char* arch, const char** summary);

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_ABI_H_ */
