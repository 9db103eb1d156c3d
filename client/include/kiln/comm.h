// kiln::comm: collectives between the GPUs of one node, one process per GPU (rank), over
// peer-mapped memory (NVLink P2P). Start the ranks with `kiln-launch -n N CMD` (docs/comm.md),
// which gives each its rank, the world size and a rendezvous address.
//
//   auto comm = kiln::comm::Communicator::FromEnvironment();   // collective
//   (*comm)->AllReduce(out, in, stream);                       // out = sum over ranks of in
//   (*comm)->Synchronize(stream);                              // waits; reports a lost peer
//
// Like NCCL: calls on a communicator are collective and must be made in the same order, with
// the same sizes and dtypes, on every rank; they are asynchronous on the caller's stream, and
// consecutive calls of one communicator must be ordered (one stream, or streams the caller
// orders). One thread uses a communicator at a time. The kernels come from kilnd like every
// other op (ops "all_reduce" and "all_reduce_add_rmsnorm", URI with dtype and world size).
//
// A rank that dies (or stops calling) does not hang the others: the peers' processes notice
// the closed rendezvous connection and stop their kernels, and a kernel waits for a peer at
// most CommOptions::kernel_timeout; afterwards every call of the communicator returns the
// error (AsyncError) and the communicator should be destroyed.
//
// The C functions below are the same collectives for C callers (kiln_comm_*).
#ifndef KILN_COMM_H_
#define KILN_COMM_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::comm {

namespace detail {
struct CommunicatorState;  // the implementation (not exported)
}

enum class AllReduceAlgorithm {
  kAuto,     // by message size and world size (ChooseAllReduceAlgorithm)
  kOneShot,  // every rank reads every peer's whole buffer: fewest steps, for small messages
  kTwoShot,  // reduce-scatter then all-gather: each rank reads 2(W-1)/W of the message
};
KILN_API const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm);  // "one_shot", ...

// The crossover Auto uses: one-shot up to this many bytes per rank, two-shot above. Measured
// on two H200s (docs/comm.md); larger world sizes use a smaller value.
KILN_API size_t OneShotMaxBytes(int world_size);
KILN_API AllReduceAlgorithm ChooseAllReduceAlgorithm(size_t bytes, int world_size);

struct CommOptions {
  // The GPU of this rank: -1 means KILN_LOCAL_RANK when set (FromEnvironment), else the
  // current context's device, else device 0.
  int device = -1;
  // Each rank's staging buffer, shared with its peers; an all-reduce of an input outside a
  // registered buffer copies the input there (inside the kernel), in pieces of at most this
  // size. 1 MiB .. 16 GiB.
  size_t buffer_bytes = size_t{64} << 20;
  // How long creating the communicator (and registering a buffer) waits for the other ranks.
  std::chrono::milliseconds setup_timeout = std::chrono::seconds(60);
  // How long a kernel waits at a barrier for a peer before it gives up (0: forever).
  std::chrono::milliseconds kernel_timeout = std::chrono::seconds(30);
};

class KILN_API Communicator {
 public:
  // Collective: every rank of `world_size` (1..8) calls it with the same `address` (a unix
  // socket path, or "@name" in the abstract namespace) and options.
  static StatusOr<std::unique_ptr<Communicator>> Create(int rank, int world_size, const std::string& address,
                                                        const CommOptions& options = {});
  // From kiln-launch's environment: KILN_RANK, KILN_WORLD_SIZE, KILN_COMM_ADDRESS, and the
  // device from KILN_LOCAL_RANK unless options.device says otherwise.
  static StatusOr<std::unique_ptr<Communicator>> FromEnvironment(const CommOptions& options = {});

  // Waits for this rank's work on the communicator to finish, then releases its memory. Not
  // collective.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  int device() const;

  // out = Σ over ranks of in, elementwise; fp32, fp16 or bf16; any shape, dense (contiguous)
  // layout; out may be in (in place) but must not partially overlap it. The sum is taken in
  // fp32 in rank order and rounded once, so every rank gets bit-identical results.
  Status AllReduce(const TensorView& out, const TensorView& in, void* stream = nullptr,
                   AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto);

  // residual ← residual + Σ over ranks of in (rounded to the dtype);
  // out ← residual · rsqrt(mean(residual²) + eps) · weight, per row.
  //   in, residual, out  [..., hidden], one dtype (fp32/fp16/bf16), dense; hidden 1..16384
  //   weight             [hidden]
  // out may be in; residual overlaps nothing else.
  Status AllReduceAddRmsNorm(const TensorView& out, const TensorView& in, const TensorView& residual,
                             const TensorView& weight, double eps, void* stream = nullptr);

  // Collective: allocates a buffer of `bytes` on every rank that every peer has mapped. An
  // all-reduce whose input lies inside it reads the peers' copies directly (no staging copy);
  // every rank must then pass the same offset into its buffer. Valid until the communicator
  // is destroyed; its output must lie elsewhere.
  StatusOr<void*> AllocateRegistered(size_t bytes);

  // OK, or why the communicator stopped working: a lost peer, or a kernel that gave up
  // waiting (DEADLINE_EXCEEDED / UNAVAILABLE naming the rank). Cheap: no driver call.
  Status AsyncError() const;
  // Waits for `stream`, then returns AsyncError().
  Status Synchronize(void* stream = nullptr);

  using Impl = detail::CommunicatorState;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::comm

extern "C" {
#endif

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
KILN_API kiln_status kiln_comm_create(int rank, int world_size, const char* address, const kiln_comm_options* options,
                                      kiln_comm** comm);
/* From KILN_RANK, KILN_WORLD_SIZE, KILN_COMM_ADDRESS and KILN_LOCAL_RANK (kiln-launch). */
KILN_API kiln_status kiln_comm_create_from_env(const kiln_comm_options* options, kiln_comm** comm);
/* Waits for this rank's work on the communicator, then frees it. NULL is ignored. */
KILN_API void kiln_comm_destroy(kiln_comm* comm);

KILN_API int kiln_comm_rank(const kiln_comm* comm);       /* -1 for NULL */
KILN_API int kiln_comm_world_size(const kiln_comm* comm); /* -1 for NULL */
KILN_API int kiln_comm_device(const kiln_comm* comm);     /* -1 for NULL */

/* out = sum over ranks of in (fp32/fp16/bf16, dense; out may be in). */
KILN_API kiln_status kiln_all_reduce(kiln_comm* comm, DLTensor* out, const DLTensor* in,
                                     kiln_all_reduce_algorithm algorithm, void* stream);
/* residual <- residual + sum over ranks of in; out <- rms_norm(residual) * weight. */
KILN_API kiln_status kiln_all_reduce_add_rms_norm(kiln_comm* comm, DLTensor* out, const DLTensor* in,
                                                  DLTensor* residual, const DLTensor* weight, double eps, void* stream);
/* Collective: a buffer every peer has mapped; an all-reduce whose input lies in it skips the
 * staging copy (every rank must pass the same offset). Freed with the communicator. */
KILN_API kiln_status kiln_comm_alloc_registered(kiln_comm* comm, size_t bytes, void** ptr);
/* KILN_OK, or why the communicator stopped (a lost peer, a kernel that gave up waiting). */
KILN_API kiln_status kiln_comm_async_error(const kiln_comm* comm);
/* Waits for stream, then kiln_comm_async_error. */
KILN_API kiln_status kiln_comm_synchronize(kiln_comm* comm, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_COMM_H_ */
