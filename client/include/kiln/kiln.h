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

/* Gated activations: input [..., 2d] = [x | y] per row, out [..., d]:
 *   kiln_silu_and_mul       out = silu(x) * y,  silu(x) = x / (1 + exp(-x))
 *   kiln_gelu_and_mul       out = gelu(x) * y,  exact: 0.5 x (1 + erf(x / sqrt(2)))
 *   kiln_gelu_tanh_and_mul  out = gelu_tanh(x) * y,  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * fp16 or bf16 (out has input's dtype), computed in fp32. Leading dims flattened by strides
 * (padded rows allowed), last dim stride 1; out has input's leading dims and must not overlap
 * it; 1 <= d <= 2^30. No rows: KILN_OK without a launch. stream as for kiln_rms_norm. */
KILN_API kiln_status kiln_silu_and_mul(DLTensor* out, const DLTensor* input, void* stream);
KILN_API kiln_status kiln_gelu_and_mul(DLTensor* out, const DLTensor* input, void* stream);
KILN_API kiln_status kiln_gelu_tanh_and_mul(DLTensor* out, const DLTensor* input, void* stream);

/* Rotary position embedding, in place on q [tokens, q_heads, head_dim] and k [tokens, k_heads,
 * head_dim] (fp16 or bf16, same dtype and head_dim; head dim stride 1, token and head strides
 * free: q and k may be views into one fused qkv buffer, but must not overlap). positions
 * [tokens] int32 or int64, contiguous. For each pair i < rotary_dim/2 of every head (NeoX:
 * (i, i + rotary_dim/2); interleaved != 0, GPT-J: (2i, 2i + 1)):
 *   x1 <- x1 cos(a) - x2 sin(a),  x2 <- x2 cos(a) + x1 sin(a),  a = positions[t] * inv_freq[i]
 * in fp32. Elements from rotary_dim on are untouched. No tokens: KILN_OK without a launch.
 * kiln_apply_rope: inv_freq[i] = theta^(-2i/rotary_dim), rotary_dim 0 means head_dim, else
 * even and <= min(head_dim, 512); theta finite > 0; llama31 NULL or Llama-3.1 scaling (the
 * rule in kiln/ops/rope.h). */
typedef struct kiln_llama31_rope_scaling {
  double factor;                 /* > 0, e.g. 8 */
  double low_freq_factor;        /* > 0, e.g. 1 */
  double high_freq_factor;       /* > low_freq_factor, e.g. 4 */
  int64_t original_max_position; /* > 0, e.g. 8192 */
} kiln_llama31_rope_scaling;

KILN_API kiln_status kiln_apply_rope(DLTensor* q, DLTensor* k, const DLTensor* positions,
                                     int64_t rotary_dim, int interleaved, double theta,
                                     const kiln_llama31_rope_scaling* llama31, void* stream);

/* cos/sin from cos_sin_cache [max_position, rotary_dim] fp32 (vLLM's layout: cos in columns
 * 0..rotary_dim/2-1, then sin; row stride free, column stride 1). A position outside
 * [0, max_position) is the caller's bug: that token's q and k are left unchanged. */
KILN_API kiln_status kiln_apply_rope_with_cos_sin_cache(DLTensor* q, DLTensor* k,
                                                        const DLTensor* positions,
                                                        const DLTensor* cos_sin_cache,
                                                        int interleaved, void* stream);

/* ---- Paged KV cache and batch decode attention (kiln/ops/decode.h, docs/kernels-decode.md) ----
 * k_cache, v_cache: [num_pages, page_size, num_kv_heads, head_dim] fp16/bf16, dense inside a
 * page (page stride free, a multiple of 8 elements), 16-byte aligned. The page table (int32,
 * contiguous): kv_indptr [B + 1], kv_indices, kv_last_page_len [B]; request b owns the pages
 * kv_indices[kv_indptr[b] .. kv_indptr[b+1]) and holds (pages - 1) * page_size +
 * kv_last_page_len[b] positions. head_dim 64/128/256; num_qo_heads / num_kv_heads 1/2/4/8;
 * page_size a power of two up to 256. */

/* k_cache[page, slot] = k[i], v_cache[page, slot] = v[i] for each token i of k, v
 * [nnz, num_kv_heads, head_dim], with page = kv_indices[kv_indptr[b] + pos / page_size],
 * slot = pos % page_size, b = batch_indices[i], pos = positions[i] (int32 [nnz]). Tokens the
 * page table does not cover are skipped. nnz == 0 is OK without a launch. */
KILN_API kiln_status kiln_append_paged_kv(DLTensor* k_cache, DLTensor* v_cache, const DLTensor* k,
                                          const DLTensor* v, const DLTensor* batch_indices,
                                          const DLTensor* positions, const DLTensor* kv_indptr,
                                          const DLTensor* kv_indices,
                                          const DLTensor* kv_last_page_len, void* stream);

typedef struct kiln_batch_decode_plan kiln_batch_decode_plan; /* opaque */

/* The schedule of one decode step (split-KV or not) from the host copies of kv_indptr
 * [batch_size + 1] and kv_last_page_len [batch_size]; reusable for every layer of the step.
 * dtype: kDLFloat 16 or kDLBfloat 16. sm_scale 0: 1/sqrt(head_dim); logits_soft_cap 0: off,
 * else logits = cap * tanh(logits / cap); window_left -1: off, else only the last
 * window_left + 1 positions. device -1: the current context's. batch_size 0 is refused. On
 * success *plan is set; free it with kiln_batch_decode_plan_destroy. */
KILN_API kiln_status kiln_batch_decode_plan_create(
    const int32_t* kv_indptr_host, const int32_t* kv_last_page_len_host, int64_t batch_size,
    int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, int64_t page_size,
    DLDataType dtype, double sm_scale, double logits_soft_cap, int64_t window_left, int device,
    kiln_batch_decode_plan** plan);
/* Device workspace bytes kiln_batch_decode needs with this plan (0: not split; 0 for NULL). */
KILN_API size_t kiln_batch_decode_plan_workspace_bytes(const kiln_batch_decode_plan* plan);
/* NULL is ignored. */
KILN_API void kiln_batch_decode_plan_destroy(kiln_batch_decode_plan* plan);

/* out [B, num_qo_heads, head_dim] = softmax(logits) V per request and query head, for q of
 * that shape (the plan's dtype; batch and head strides even); lse (NULL: not written) fp32
 * [B, num_qo_heads] gets ln(sum exp(logits)). workspace: device memory of at least
 * kiln_batch_decode_plan_workspace_bytes(plan), 16-byte aligned (NULL when that is 0). */
KILN_API kiln_status kiln_batch_decode(const kiln_batch_decode_plan* plan, DLTensor* out,
                                       DLTensor* lse, const DLTensor* q, const DLTensor* k_cache,
                                       const DLTensor* v_cache, const DLTensor* kv_indptr,
                                       const DLTensor* kv_indices,
                                       const DLTensor* kv_last_page_len, void* workspace,
                                       size_t workspace_bytes, void* stream);

/* ---- Sampling (kiln/ops/sampling.h, docs/kernels-sampling.md) ----
 * One token per row: probs [B, V] fp32 (last dim stride 1, rows may be padded, 1 <= V <=
 * 1048575; non-negative, normalized or not; negatives and NaN count as 0), samples [B] int32
 * or int64, contiguous, not overlapping the inputs. Per-request parameters: a DLTensor [B]
 * (int32 top_k, fp32 top_p / min_p, contiguous, on probs' device), or NULL and the scalar for
 * every row. Deterministic: Philox4x32-10 with key seed and counter (token / 4, row, offset);
 * the same arguments give the same samples. Exact allowed sets, ties at a threshold kept:
 *   kiln_top_k_sampling        value >= the k-th largest; top_k_scalar >= 0, 0: no top-k
 *   kiln_top_p_sampling        (sum of values > v) < p * (row sum); 0 < top_p_scalar <= 1
 *   kiln_top_k_top_p_sampling  top-k, then top-p over the renormalized top-k set
 *   kiln_min_p_sampling        value >= fp32(min_p * row max); 0 <= min_p_scalar <= 1
 *   kiln_argmax                the largest value (NaN largest); ties: the lowest index
 * Tensor entries are read as: k <= 0 or >= V no top-k; p >= 1 no top-p, p <= 0 keeps the
 * largest value; min_p clamped to [0, 1]. B = 0: KILN_OK without a launch. */
KILN_API kiln_status kiln_top_k_sampling(DLTensor* samples, const DLTensor* probs,
                                         const DLTensor* top_k /* NULL: top_k_scalar */,
                                         int64_t top_k_scalar, uint64_t seed, uint64_t offset,
                                         void* stream);
KILN_API kiln_status kiln_top_p_sampling(DLTensor* samples, const DLTensor* probs,
                                         const DLTensor* top_p /* NULL: top_p_scalar */,
                                         double top_p_scalar, uint64_t seed, uint64_t offset,
                                         void* stream);
KILN_API kiln_status kiln_top_k_top_p_sampling(DLTensor* samples, const DLTensor* probs,
                                               const DLTensor* top_k, int64_t top_k_scalar,
                                               const DLTensor* top_p, double top_p_scalar,
                                               uint64_t seed, uint64_t offset, void* stream);
KILN_API kiln_status kiln_min_p_sampling(DLTensor* samples, const DLTensor* probs,
                                         const DLTensor* min_p /* NULL: min_p_scalar */,
                                         double min_p_scalar, uint64_t seed, uint64_t offset,
                                         void* stream);
KILN_API kiln_status kiln_argmax(DLTensor* samples, const DLTensor* probs, void* stream);

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
