/* The C ABI of libkiln_client: the ops on DLPack tensors, for any language with a C FFI.
 *
 * Every function returning kiln_status sets a thread-local message on failure, read with
 * kiln_last_error(), and clears it on success. No function throws or aborts.
 *
 *   DLTensor x = ..., w = ..., y = ...;   // kDLCUDA tensors, fp32/fp16/bf16, lanes 1
 *   if (kiln_rms_norm(&y, &x, &w, 1e-6, stream) != KILN_OK)
 *     fprintf(stderr, "rms_norm: %s\n", kiln_last_error());
 */
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include <dlpack/dlpack.h>
#include <stddef.h>

#include "kiln/export.h"
#include "kiln/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The same numbers as kiln::StatusCode. */
typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1,    /* a bad tensor or value; nothing was launched */
  KILN_ERROR_NOT_FOUND = 2,
  KILN_ERROR_FAILED_PRECONDITION = 3, /* e.g. the op cannot be built for this GPU */
  KILN_ERROR_UNAVAILABLE = 4,         /* the daemon kilnd cannot be reached */
  KILN_ERROR_DEADLINE_EXCEEDED = 5,
  KILN_ERROR_DATA_LOSS = 6,           /* a cubin failed its checksum */
  KILN_ERROR_NO_DRIVER = 7,           /* no CUDA driver or no GPU */
  KILN_ERROR_CUDA = 8,                /* a CUDA driver call failed */
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

/* out = input / sqrt(mean(input^2, last dim) + eps) * weight.
 * input [..., hidden] (leading dims flattened by strides; last dim stride 1), weight [hidden],
 * out like input (may be input itself). Same dtype (fp32, fp16, bf16), same CUDA device, which
 * must be the current context's (with no current context its primary context is used).
 * stream: a CUstream / cudaStream_t, or NULL for the default stream. */
KILN_API kiln_status kiln_rms_norm(DLTensor* out, const DLTensor* input, const DLTensor* weight,
                                   double eps, void* stream);

/* residual <- input + residual; input <- rms_norm(residual) * weight; both in place. */
KILN_API kiln_status kiln_fused_add_rms_norm(DLTensor* input, DLTensor* residual,
                                             const DLTensor* weight, double eps, void* stream);

/* ---- Collectives between the GPUs of one node (kiln/comm.h, docs/comm.md) ----
 * One process per GPU, started with `kiln-launch -n N CMD`. Every call on a communicator is
 * collective: all ranks make it, in the same order, with the same sizes and dtypes. */
typedef struct kiln_comm kiln_comm; /* opaque */

typedef enum kiln_all_reduce_algorithm {
  KILN_ALL_REDUCE_AUTO = 0,     /* by message size (the documented crossover) */
  KILN_ALL_REDUCE_ONE_SHOT = 1, /* forced: a diagnostic and benchmarking control */
  KILN_ALL_REDUCE_TWO_SHOT = 2
} kiln_all_reduce_algorithm;

/* Fill with kiln_comm_options_init(); struct_size lets later versions add fields. */
typedef struct kiln_comm_options {
  size_t struct_size;    /* sizeof(kiln_comm_options) */
  int device;            /* -1: KILN_LOCAL_RANK (from_env), else the current device, else 0 */
  size_t buffer_bytes;   /* staging buffer per rank; 0: 64 MiB */
  int setup_timeout_ms;  /* waiting for the other ranks at creation; <= 0: 60 s */
  int kernel_timeout_ms; /* how long a kernel waits for a peer; < 0: 30 s, 0: forever */
} kiln_comm_options;

KILN_API void kiln_comm_options_init(kiln_comm_options* options);

/* Collective. options may be NULL (defaults). On success *comm is set; destroy it with
 * kiln_comm_destroy. */
KILN_API kiln_status kiln_comm_create(int rank, int world_size, const char* address,
                                      const kiln_comm_options* options, kiln_comm** comm);
/* From KILN_RANK, KILN_WORLD_SIZE, KILN_COMM_ADDRESS and KILN_LOCAL_RANK (kiln-launch). */
KILN_API kiln_status kiln_comm_create_from_env(const kiln_comm_options* options,
                                               kiln_comm** comm);
/* Waits for this rank's work on the communicator, then frees it. NULL is ignored. */
KILN_API void kiln_comm_destroy(kiln_comm* comm);

KILN_API int kiln_comm_rank(const kiln_comm* comm);       /* -1 for NULL */
KILN_API int kiln_comm_world_size(const kiln_comm* comm); /* -1 for NULL */
KILN_API int kiln_comm_device(const kiln_comm* comm);     /* -1 for NULL */

/* out = sum over ranks of in (fp32/fp16/bf16, dense; out may be in). */
KILN_API kiln_status kiln_all_reduce(kiln_comm* comm, DLTensor* out, const DLTensor* in,
                                     kiln_all_reduce_algorithm algorithm, void* stream);
/* residual <- residual + sum over ranks of in; out <- rms_norm(residual) * weight. */
KILN_API kiln_status kiln_all_reduce_add_rms_norm(kiln_comm* comm, DLTensor* out,
                                                  const DLTensor* in, DLTensor* residual,
                                                  const DLTensor* weight, double eps,
                                                  void* stream);
/* Collective: a buffer every peer has mapped; an all-reduce whose input lies in it skips the
 * staging copy (every rank must pass the same offset). Freed with the communicator. */
KILN_API kiln_status kiln_comm_alloc_registered(kiln_comm* comm, size_t bytes, void** ptr);
/* KILN_OK, or why the communicator stopped (a lost peer, a kernel that gave up waiting). */
KILN_API kiln_status kiln_comm_async_error(const kiln_comm* comm);
/* Waits for stream, then kiln_comm_async_error. */
KILN_API kiln_status kiln_comm_synchronize(kiln_comm* comm, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KILN_H_ */
