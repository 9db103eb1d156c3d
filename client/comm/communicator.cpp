// kiln::comm::Communicator (kiln/comm.h): rendezvous, peer-mapped memory, the control words a
// kernel reports through, and the host side of each collective.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "client/comm/all_reduce_plan.h"
#include "client/comm/comm_kernels.h"
#include "client/comm/peer_check.h"
#include "client/comm/rendezvous.h"
#include "client/comm/symmetric_memory.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/current_context.h"
#include "client/core/driver/devices.h"
#include "client/core/loader/kernel_launch.h"
#include "client/diag/call_trace.h"
#include "client/ops/op_table.h"
#include "kiln/comm.h"
#include "kiln/comm/comm_contract.h"

namespace kiln::comm {

using client::CudaDriver;
using client::InvalidArgument;
using KernelControl = ::KilnCommControl;
using KernelPeers = ::KilnCommPeers;
using client::comm::SymmetricMemory;

namespace {

constexpr size_t kMinBufferBytes = size_t{1} << 20;
constexpr size_t kMaxBufferBytes = size_t{16} << 30;
constexpr size_t kVectorBytes = 16;

bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The collectives in the op table: traced like every op, but not replayable (one process
// holds one rank's part of a call).
constexpr const char* kNotReplayable =
    "a collective: its result depends on every rank's input, and one process holds one rank's dump; replay "
    "the ranks' dumps with a communicator of the same world size instead";
const client::OpDescriptor kAllReduceCall = {.name = "all_reduce",
                                             .op = kiln::comm::kAllReduceOp,
                                             .family = "comm",
                                             .cpp_api = "kiln::comm::Communicator::AllReduce",
                                             .c_api = "kiln_all_reduce",
                                             .not_invokable = kNotReplayable};
const client::OpDescriptor kAddRmsNormCall = {.name = "all_reduce_add_rms_norm",
                                              .op = kiln::comm::kAllReduceAddRmsNormOp,
                                              .family = "comm",
                                              .cpp_api = "kiln::comm::Communicator::AllReduceAddRmsNorm",
                                              .c_api = "kiln_all_reduce_add_rms_norm",
                                              .not_invokable = kNotReplayable};
KILN_REGISTER_OP(kAllReduceCall);
KILN_REGISTER_OP(kAddRmsNormCall);

const char* kAllReduceApi = kAllReduceCall.cpp_api;

// A forced algorithm is a diagnostic control: said once per process and algorithm, on stderr.
void NoteForcedAlgorithm(AllReduceAlgorithm algorithm) {
  static std::atomic<unsigned> noted{0};
  const unsigned bit = 1u << static_cast<unsigned>(algorithm);
  if (noted.fetch_or(bit) & bit) return;
  std::fprintf(stderr,
               "[kiln] all-reduce algorithm forced to %s (a diagnostic control; the default "
               "auto picks by size, docs/comm.md)\n",
               AllReduceAlgorithmName(algorithm));
}
const char* kAddRmsNormApi = kAddRmsNormCall.cpp_api;

}  // namespace

// A local (not shared) device buffer that grows on demand: where a rank bounces a misaligned
// tensor so that every rank launches the same kernel shape.
class Scratch {
 public:
  explicit Scratch(const CudaDriver& driver) : driver_(driver) {}
  ~Scratch() {
    if (ptr_ != 0) driver_.cuMemFree(ptr_);
  }
  StatusOr<CUdeviceptr> Get(size_t bytes) {
    if (bytes <= size_) return ptr_;
    if (ptr_ != 0) {
      driver_.cuMemFree(ptr_);
      ptr_ = 0;
      size_ = 0;
    }
    KILN_RETURN_IF_ERROR(driver_.Check(driver_.cuMemAlloc(&ptr_, bytes), "cuMemAlloc(scratch)"));
    size_ = bytes;
    return ptr_;
  }

 private:
  const CudaDriver& driver_;
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

namespace detail {

struct CommunicatorState {
  const CudaDriver* driver = nullptr;
  int rank = 0;
  int world = 1;
  client::ContextInfo context;
  CommOptions options;
  std::unique_ptr<client::comm::Rendezvous> rendezvous;
  std::unique_ptr<SymmetricMemory> main;  // [flags | epochs | staging]
  std::vector<std::unique_ptr<SymmetricMemory>> registered;
  KernelControl* control = nullptr;  // host-mapped pinned memory
  CUdeviceptr control_device = 0;
  Scratch in_scratch{*driver};
  Scratch out_scratch{*driver};
  Scratch residual_scratch{*driver};
  Scratch weight_scratch{*driver};

  std::mutex mu;  // one call at a time
  mutable std::mutex error_mu;
  Status lost;  // set once, by the rendezvous thread, when a peer is lost

  explicit CommunicatorState(const CudaDriver& d) : driver(&d) {}
  ~CommunicatorState();

  size_t StagingBytes() const { return main->size() - kiln::comm::kDataOffset; }
  unsigned long long TimeoutNs() const {
    return static_cast<unsigned long long>(options.kernel_timeout.count()) * 1000000ull;
  }

  void OnPeerLost(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (lost.ok())
        lost = Status(StatusCode::kUnavailable, "communicator rank " + std::to_string(rank) + " of " +
                                                    std::to_string(world) + ": " + why +
                                                    "; the communicator stopped (destroy it)");
    }
    // Kernels waiting at a barrier poll this word and give up.
    if (control != nullptr) __atomic_store_n(&control->abort, 1u, __ATOMIC_RELEASE);
  }

  Status AsyncError() const {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      KILN_RETURN_IF_ERROR(lost);
    }
    if (control == nullptr) return OkStatus();
    const unsigned error = __atomic_load_n(&control->error, __ATOMIC_ACQUIRE);
    if (error == kiln::comm::kErrorNone) return OkStatus();
    const std::string who = "communicator rank " + std::to_string(rank) + " of " + std::to_string(world) + ": ";
    const std::string peer = std::to_string(__atomic_load_n(&control->error_peer, __ATOMIC_ACQUIRE));
    const std::string block = std::to_string(__atomic_load_n(&control->error_block, __ATOMIC_ACQUIRE));
    if (error == kiln::comm::kErrorTimeout)
      return Status(StatusCode::kDeadlineExceeded,
                    who + "a collective kernel waited more than " + std::to_string(options.kernel_timeout.count()) +
                        " ms for rank " + peer + " (block " + block +
                        ") and gave up; every rank must make the same calls in the same order. "
                        "The communicator stopped (destroy it)");
    return Status(StatusCode::kUnavailable, who + "a collective kernel was aborted while waiting for rank " + peer +
                                                " (a peer was lost); the communicator stopped (destroy it)");
  }

  // The calling thread's context must be the communicator's.
  Status CheckContext(const char* api) const {
    auto ctx = client::CurrentContext(*driver, context.device);
    if (!ctx.ok()) return ctx.status().WithContext(api);
    if (ctx->context != context.context)
      return InvalidArgument(
          std::string(api) + ": the current CUDA context (on cuda:" + std::to_string(ctx->device) +
          ") is not the one the communicator was created in (on cuda:" + std::to_string(context.device) + ")");
    return OkStatus();
  }

  const SymmetricMemory* FindRegistered(const void* p, size_t bytes) const {
    for (const auto& r : registered)
      if (r->ContainsLocal(p, bytes)) return r.get();
    return nullptr;
  }

  Status Copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void* stream) const {
    return driver->Check(driver->cuMemcpyDtoDAsync(dst, src, bytes, static_cast<CUstream>(stream)),
                         "cuMemcpyDtoDAsync");
  }

  KernelPeers Peers(const std::vector<CUdeviceptr>& data) const {
    KernelPeers peers = {};
    for (int r = 0; r < world; ++r) {
      peers.data[r] = reinterpret_cast<void*>(data[static_cast<size_t>(r)]);
      peers.flags[r] = reinterpret_cast<unsigned int*>(main->base(r));
    }
    return peers;
  }

  std::vector<CUdeviceptr> Staging() const {
    std::vector<CUdeviceptr> data(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) data[static_cast<size_t>(r)] = main->base(r) + kiln::comm::kDataOffset;
    return data;
  }

  // One launch of entry 0 (one-shot) or 1 (two-shot) of `kernels`: the grid every rank computes
  // alike (kiln::comm::AllReduceGrid), the contract's parameter struct.
  Status LaunchAllReduce(const client::OpLaunch& kernels, bool two_shot, const KernelPeers& peers, const void* input,
                         void* output, int64_t n, int vec, bool copy_input, void* stream) {
    const client::EntryLaunchReady& e = kernels.entry(two_shot ? 1 : 0);
    const char* entry = two_shot ? kiln::comm::kTwoShotEntry : kiln::comm::kOneShotEntry;
    LaunchConfig config;
    config.grid.x = static_cast<unsigned>(
        kiln::comm::AllReduceGrid(n, vec, world, two_shot, static_cast<int>(e.block), static_cast<int>(e.max_blocks)));
    config.block.x = e.block;
    config.stream = stream;
    kiln::comm::AllReduceParams params = {peers,
                                          reinterpret_cast<unsigned int*>(main->local() + kiln::comm::kEpochsOffset),
                                          reinterpret_cast<KernelControl*>(control_device),
                                          input,
                                          output,
                                          n,
                                          rank,
                                          copy_input ? 1 : 0,
                                          TimeoutNs()};
    void* args[] = {&params};
    if (KILN_UNLIKELY(client::diag::Level() != 0) && client::diag::InTracedCall())
      client::diag::NoteBackend(std::string(two_shot ? "two_shot" : "one_shot") +
                                (copy_input ? ":staging" : ":registered-input"));
    return client::LaunchFunction(*driver, e.function, config, args, entry, &kernels.library->info);
  }

  Status AllReduce(const client::comm::AllReducePlan& plan, void* stream, AllReduceAlgorithm requested);
  Status AddRmsNorm(const client::comm::AddRmsNormPlan& plan, void* stream);
};

CommunicatorState::~CommunicatorState() {
  if (driver == nullptr) return;
  CUcontext previous = nullptr;
  driver->cuCtxGetCurrent(&previous);
  if (context.context != nullptr) driver->cuCtxSetCurrent(context.context);
  // Our kernels must finish before the memory they use goes (a stuck one gives up: the
  // rendezvous thread raises abort when a peer is lost, and every wait has its timeout).
  driver->cuCtxSynchronize();
  if (rendezvous) rendezvous->Close();
  rendezvous.reset();
  registered.clear();
  main.reset();
  if (control != nullptr) driver->cuMemFreeHost(control);
  control = nullptr;
  driver->cuCtxSetCurrent(previous);
}

Status CommunicatorState::AllReduce(const client::comm::AllReducePlan& plan, void* stream,
                                    AllReduceAlgorithm requested) {
  const size_t es = plan.element_size;
  const size_t bytes = static_cast<size_t>(plan.n) * es;
  if (world == 1) {
    if (plan.out == plan.in) return OkStatus();
    return Copy(reinterpret_cast<CUdeviceptr>(plan.out), reinterpret_cast<CUdeviceptr>(plan.in), bytes, stream);
  }
  // One vector width for every rank (it shapes the partition of the work between blocks, which
  // must match across ranks): 16 bytes. A rank whose own pointers are less aligned bounces
  // them through local buffers instead.
  const int vec = static_cast<int>(kVectorBytes / es);
  const bool out_aligned = Aligned(plan.out, kVectorBytes);

  // A registered input: the kernel reads every peer's copy in place.
  if (const SymmetricMemory* reg = FindRegistered(plan.in, bytes)) {
    const uintptr_t out_begin = reinterpret_cast<uintptr_t>(plan.out);
    const uintptr_t in_begin = reinterpret_cast<uintptr_t>(plan.in);
    if (out_begin < in_begin + bytes && in_begin < out_begin + bytes)
      return InvalidArgument(std::string(kAllReduceApi) +
                             ": out overlaps the registered input buffer, which the peers read while "
                             "this rank writes; write the result to another tensor");
    const CUdeviceptr offset = in_begin - reg->local();
    if (offset % kVectorBytes == 0) {  // the same offset on every rank, so the same choice
      std::vector<CUdeviceptr> data(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) data[static_cast<size_t>(r)] = reg->base(r) + offset;
      const bool two_shot = client::comm::ResolveAlgorithm(requested, bytes, world) == AllReduceAlgorithm::kTwoShot;
      KILN_ASSIGN_OR_RETURN(const client::OpLaunch* kernels,
                            client::comm::AllReduceKernels(*driver, context, plan.dtype, world, vec));
      void* out = plan.out;
      if (!out_aligned) {
        KILN_ASSIGN_OR_RETURN(auto scratch, out_scratch.Get(bytes));
        out = reinterpret_cast<void*>(scratch);
      }
      KILN_RETURN_IF_ERROR(LaunchAllReduce(*kernels, two_shot, Peers(data), plan.in, out, plan.n, vec,
                                           /*copy_input=*/false, stream));
      if (!out_aligned)
        return Copy(reinterpret_cast<CUdeviceptr>(plan.out), reinterpret_cast<CUdeviceptr>(out), bytes, stream);
      return OkStatus();
    }
  }

  // The staging path: every rank pushes its input into slot `rank` of each peer's staging
  // buffer (the kernels' copy_input mode), in pieces of at most a slot.
  const int64_t piece = static_cast<int64_t>(StagingBytes() / es / static_cast<size_t>(world)) / vec * vec;
  const std::vector<CUdeviceptr> staging = Staging();
  const KernelPeers peers = Peers(staging);
  const bool in_aligned = Aligned(plan.in, kVectorBytes);
  for (int64_t offset = 0; offset < plan.n; offset += piece) {
    const int64_t count = std::min(piece, plan.n - offset);
    const size_t piece_bytes = static_cast<size_t>(count) * es;
    const char* src = static_cast<const char*>(plan.in) + static_cast<size_t>(offset) * es;
    char* dst = static_cast<char*>(plan.out) + static_cast<size_t>(offset) * es;
    const bool two_shot = client::comm::ResolveAlgorithm(requested, piece_bytes, world) == AllReduceAlgorithm::kTwoShot;
    KILN_ASSIGN_OR_RETURN(const client::OpLaunch* kernels,
                          client::comm::AllReduceKernels(*driver, context, plan.dtype, world, vec));
    const void* kernel_in = src;
    if (!in_aligned) {  // an aligned local copy: the same kernel as on every other rank
      KILN_ASSIGN_OR_RETURN(auto scratch, in_scratch.Get(piece_bytes));
      KILN_RETURN_IF_ERROR(Copy(scratch, reinterpret_cast<CUdeviceptr>(src), piece_bytes, stream));
      kernel_in = reinterpret_cast<const void*>(scratch);
    }
    void* out = dst;
    if (!out_aligned) {
      KILN_ASSIGN_OR_RETURN(auto scratch, out_scratch.Get(piece_bytes));
      out = reinterpret_cast<void*>(scratch);
    }
    KILN_RETURN_IF_ERROR(LaunchAllReduce(*kernels, two_shot, peers, kernel_in, out, count, vec,
                                         /*copy_input=*/true, stream));
    if (!out_aligned)
      KILN_RETURN_IF_ERROR(
          Copy(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(out), piece_bytes, stream));
  }
  return OkStatus();
}

Status CommunicatorState::AddRmsNorm(const client::comm::AddRmsNormPlan& plan, void* stream) {
  const size_t es = plan.element_size;
  int vec = static_cast<int>(kVectorBytes / es);
  while (vec > 1 && plan.hidden % vec != 0) vec /= 2;  // from hidden only: equal on every rank
  const size_t align = static_cast<size_t>(vec) * es;
  const size_t row_bytes = static_cast<size_t>(plan.hidden) * es;
  KILN_ASSIGN_OR_RETURN(const client::OpLaunch* kernels,
                        client::comm::AddRmsNormKernel(*driver, context, plan.dtype, world, plan.hidden, vec));
  const client::EntryLaunchReady& e = kernels->entry();

  const void* weight = plan.weight;
  if (!Aligned(weight, align)) {
    KILN_ASSIGN_OR_RETURN(auto scratch, weight_scratch.Get(row_bytes));
    KILN_RETURN_IF_ERROR(Copy(scratch, reinterpret_cast<CUdeviceptr>(weight), row_bytes, stream));
    weight = reinterpret_cast<const void*>(scratch);
  }
  const int64_t piece_rows = static_cast<int64_t>(StagingBytes() / row_bytes);
  const std::vector<CUdeviceptr> staging = Staging();
  const KernelPeers peers = Peers(staging);
  for (int64_t row = 0; row < plan.rows; row += piece_rows) {
    const int64_t rows = std::min(piece_rows, plan.rows - row);
    const size_t bytes = static_cast<size_t>(rows) * row_bytes;
    const size_t offset = static_cast<size_t>(row) * row_bytes;
    const char* in = static_cast<const char*>(plan.in) + offset;
    char* residual = static_cast<char*>(plan.residual) + offset;
    char* out = static_cast<char*>(plan.out) + offset;

    bool copy_input = true;
    if (!Aligned(in, align)) {
      KILN_RETURN_IF_ERROR(Copy(staging[static_cast<size_t>(rank)], reinterpret_cast<CUdeviceptr>(in), bytes, stream));
      copy_input = false;
    }
    void* kernel_residual = residual;
    if (!Aligned(residual, align)) {
      KILN_ASSIGN_OR_RETURN(auto scratch, residual_scratch.Get(bytes));
      KILN_RETURN_IF_ERROR(Copy(scratch, reinterpret_cast<CUdeviceptr>(residual), bytes, stream));
      kernel_residual = reinterpret_cast<void*>(scratch);
    }
    void* kernel_out = out;
    if (!Aligned(out, align)) {
      KILN_ASSIGN_OR_RETURN(auto scratch, out_scratch.Get(bytes));
      kernel_out = reinterpret_cast<void*>(scratch);
    }

    LaunchConfig config;
    config.grid.x = static_cast<unsigned>(kiln::comm::AllReduceAddRmsNormGrid(rows, static_cast<int>(e.max_blocks)));
    config.block.x = e.block;
    config.stream = stream;
    kiln::comm::AllReduceAddRmsNormParams params = {
        peers,
        reinterpret_cast<unsigned int*>(main->local() + kiln::comm::kEpochsOffset),
        reinterpret_cast<KernelControl*>(control_device),
        in,
        kernel_residual,
        weight,
        kernel_out,
        rows,
        plan.eps,
        rank,
        copy_input ? 1 : 0,
        TimeoutNs()};
    void* args[] = {&params};
    KILN_RETURN_IF_ERROR(client::LaunchFunction(*driver, e.function, config, args, kiln::comm::kAddRmsNormEntry,
                                                &kernels->library->info));
    if (kernel_residual != residual)
      KILN_RETURN_IF_ERROR(
          Copy(reinterpret_cast<CUdeviceptr>(residual), reinterpret_cast<CUdeviceptr>(kernel_residual), bytes, stream));
    if (kernel_out != out)
      KILN_RETURN_IF_ERROR(
          Copy(reinterpret_cast<CUdeviceptr>(out), reinterpret_cast<CUdeviceptr>(kernel_out), bytes, stream));
  }
  return OkStatus();
}

}  // namespace detail

// --- the public class ---

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world; }
int Communicator::device() const { return impl_->context.device; }

StatusOr<std::unique_ptr<Communicator>> Communicator::Create(int rank, int world_size, const std::string& address,
                                                             const CommOptions& options) {
  const std::string api = "kiln::comm::Communicator::Create";
  if (world_size < 1 || world_size > kiln::comm::kMaxWorld)
    return InvalidArgument(api + ": world_size must be 1.." + std::to_string(kiln::comm::kMaxWorld) + ", found " +
                           std::to_string(world_size));
  if (rank < 0 || rank >= world_size)
    return InvalidArgument(api + ": rank must be 0.." + std::to_string(world_size - 1) + ", found " +
                           std::to_string(rank));
  if (address.empty())
    return InvalidArgument(api + ": the rendezvous address is empty (kiln-launch sets KILN_COMM_ADDRESS)");
  if (options.buffer_bytes < kMinBufferBytes || options.buffer_bytes > kMaxBufferBytes)
    return InvalidArgument(api + ": buffer_bytes must be 1 MiB .. 16 GiB, found " +
                           std::to_string(options.buffer_bytes));
  if (options.setup_timeout.count() <= 0 || options.kernel_timeout.count() < 0)
    return InvalidArgument(api + ": setup_timeout must be > 0 and kernel_timeout >= 0 (0: no limit)");

  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(api);
  auto count = client::DeviceCount(**driver);
  if (!count.ok()) return count.status().WithContext(api);
  int device = options.device;
  if (device >= *count)
    return InvalidArgument(api + ": device cuda:" + std::to_string(device) + " does not exist (" +
                           std::to_string(*count) + " visible)");
  auto ctx = client::CurrentContext(**driver, device < 0 ? 0 : device);
  if (!ctx.ok()) return ctx.status().WithContext(api);
  if (device >= 0 && ctx->device != device)
    return InvalidArgument(api + ": the current CUDA context is on cuda:" + std::to_string(ctx->device) +
                           ", not cuda:" + std::to_string(device) + "; make cuda:" + std::to_string(device) +
                           " current first (cudaSetDevice)");
  if (ctx->cc_major < 8)
    return Status(StatusCode::kFailedPrecondition, api + ": cuda:" + std::to_string(ctx->device) + " is sm_" +
                                                       std::to_string(ctx->cc_major * 10 + ctx->cc_minor) +
                                                       "; the all-reduce kernels need sm_80 or newer");

  auto impl = std::make_unique<Impl>(**driver);
  impl->rank = rank;
  impl->world = world_size;
  impl->context = *ctx;
  impl->options = options;

  auto rendezvous = client::comm::Rendezvous::Join(address, rank, world_size, options.setup_timeout);
  if (!rendezvous.ok()) return rendezvous.status().WithContext(api);
  impl->rendezvous = std::move(rendezvous).value();

  // Every rank on its own GPU, each pair able to reach the other, one buffer size.
  KILN_RETURN_IF_ERROR(
      client::comm::CheckPeers(**driver, ctx->device, options.buffer_bytes, *impl->rendezvous, options.setup_timeout)
          .WithContext(api));

  void* host = nullptr;
  KILN_RETURN_IF_ERROR((*driver)->Check((*driver)->cuMemHostAlloc(&host, sizeof(KernelControl),
                                                                  CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
                                        "cuMemHostAlloc(control words)"));
  std::memset(host, 0, sizeof(KernelControl));
  impl->control = static_cast<KernelControl*>(host);
  KILN_RETURN_IF_ERROR((*driver)->Check((*driver)->cuMemHostGetDevicePointer(&impl->control_device, host, 0),
                                        "cuMemHostGetDevicePointer"));

  if (world_size > 1) {
    auto memory = SymmetricMemory::Create(**driver, ctx->device, kiln::comm::kDataOffset + options.buffer_bytes,
                                          *impl->rendezvous, options.setup_timeout);
    if (!memory.ok()) return memory.status().WithContext(api);
    impl->main = std::move(memory).value();
  }
  Impl* raw = impl.get();
  impl->rendezvous->OnPeerLost([raw](const std::string& why) { raw->OnPeerLost(why); });
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

namespace {

StatusOr<int> EnvInt(const char* name, int lo, int hi) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0')
    return InvalidArgument(std::string(name) + " is not set (start the ranks with kiln-launch -n N)");
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < lo || value > hi)
    return InvalidArgument(std::string(name) + "='" + text + "' is not an integer in " + std::to_string(lo) + ".." +
                           std::to_string(hi));
  return static_cast<int>(value);
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> Communicator::FromEnvironment(const CommOptions& options) {
  const std::string api = "kiln::comm::Communicator::FromEnvironment";
  auto world = EnvInt("KILN_WORLD_SIZE", 1, kiln::comm::kMaxWorld);
  if (!world.ok()) return world.status().WithContext(api);
  auto rank = EnvInt("KILN_RANK", 0, *world - 1);
  if (!rank.ok()) return rank.status().WithContext(api);
  const char* address = std::getenv("KILN_COMM_ADDRESS");
  if (address == nullptr || *address == '\0')
    return InvalidArgument(api + ": KILN_COMM_ADDRESS is not set (start the ranks with kiln-launch -n N)");
  CommOptions resolved = options;
  if (resolved.device < 0 && std::getenv("KILN_LOCAL_RANK") != nullptr) {
    auto local = EnvInt("KILN_LOCAL_RANK", 0, 1023);
    if (!local.ok()) return local.status().WithContext(api);
    resolved.device = *local;
  }
  return Create(*rank, *world, address, resolved);
}

namespace {

// The calls themselves (check, lock, launch); the members below add the call tracing.
Status RunAllReduce(detail::CommunicatorState& impl, const TensorView& out, const TensorView& in, void* stream,
                    AllReduceAlgorithm algorithm) {
  if (algorithm != AllReduceAlgorithm::kAuto) NoteForcedAlgorithm(algorithm);
  auto plan = client::comm::PlanAllReduce(out, in);
  if (!plan.ok()) return plan.status().WithContext(kAllReduceApi);
  if (plan->device != impl.context.device)
    return InvalidArgument(std::string(kAllReduceApi) + ": in is on cuda:" + std::to_string(plan->device) +
                           ", the communicator on cuda:" + std::to_string(impl.context.device));
  std::lock_guard<std::mutex> lock(impl.mu);
  KILN_RETURN_IF_ERROR(impl.AsyncError());
  if (plan->n == 0) return OkStatus();
  KILN_RETURN_IF_ERROR(impl.CheckContext(kAllReduceApi));
  Status status = impl.AllReduce(*plan, stream, algorithm);
  return status.ok() ? status : status.WithContext(kAllReduceApi);
}

Status RunAllReduceAddRmsNorm(detail::CommunicatorState& impl, const TensorView& out, const TensorView& in,
                              const TensorView& residual, const TensorView& weight, double eps, void* stream) {
  auto plan = client::comm::PlanAddRmsNorm(out, in, residual, weight, eps);
  if (!plan.ok()) return plan.status().WithContext(kAddRmsNormApi);
  if (plan->device != impl.context.device)
    return InvalidArgument(std::string(kAddRmsNormApi) + ": in is on cuda:" + std::to_string(plan->device) +
                           ", the communicator on cuda:" + std::to_string(impl.context.device));
  if (impl.world == 1)
    return Status(StatusCode::kUnimplemented, std::string(kAddRmsNormApi) +
                                                  ": a world of one rank has nothing to reduce; use "
                                                  "kiln::ops::fused_add_rms_norm");
  std::lock_guard<std::mutex> lock(impl.mu);
  KILN_RETURN_IF_ERROR(impl.AsyncError());
  if (plan->rows == 0) return OkStatus();
  KILN_RETURN_IF_ERROR(impl.CheckContext(kAddRmsNormApi));
  Status status = impl.AddRmsNorm(*plan, stream);
  return status.ok() ? status : status.WithContext(kAddRmsNormApi);
}

}  // namespace

Status Communicator::AllReduce(const TensorView& out, const TensorView& in, void* stream,
                               AllReduceAlgorithm algorithm) {
  if (KILN_UNLIKELY(client::diag::Level() != 0))
    return client::diag::Traced(
        kAllReduceCall.name, kAllReduceApi, stream,
        [&](client::diag::OpCall& c) {
          c.Out("out", out).In("in", in);
          c.Param("algorithm", std::string(AllReduceAlgorithmName(algorithm)))
              .Param("rank", impl_->rank)
              .Param("world_size", impl_->world);
        },
        [&] { return RunAllReduce(*impl_, out, in, stream, algorithm); });
  return RunAllReduce(*impl_, out, in, stream, algorithm);
}

Status Communicator::AllReduceAddRmsNorm(const TensorView& out, const TensorView& in, const TensorView& residual,
                                         const TensorView& weight, double eps, void* stream) {
  if (KILN_UNLIKELY(client::diag::Level() != 0))
    return client::diag::Traced(
        kAddRmsNormCall.name, kAddRmsNormApi, stream,
        [&](client::diag::OpCall& c) {
          c.Out("out", out).In("in", in).InOut("residual", residual).In("weight", weight);
          c.Param("eps", eps).Param("rank", impl_->rank).Param("world_size", impl_->world);
        },
        [&] { return RunAllReduceAddRmsNorm(*impl_, out, in, residual, weight, eps, stream); });
  return RunAllReduceAddRmsNorm(*impl_, out, in, residual, weight, eps, stream);
}

StatusOr<void*> Communicator::AllocateRegistered(size_t bytes) {
  const std::string api = "kiln::comm::Communicator::AllocateRegistered";
  if (bytes == 0 || bytes > kMaxBufferBytes)
    return InvalidArgument(api + ": bytes must be 1 .. 16 GiB, found " + std::to_string(bytes));
  std::lock_guard<std::mutex> lock(impl_->mu);
  KILN_RETURN_IF_ERROR(impl_->AsyncError());
  if (impl_->world == 1) return Status(StatusCode::kUnimplemented, api + ": a world of one rank shares nothing");
  KILN_RETURN_IF_ERROR(impl_->CheckContext(api.c_str()));
  auto memory = SymmetricMemory::Create(*impl_->driver, impl_->context.device, bytes, *impl_->rendezvous,
                                        impl_->options.setup_timeout);
  if (!memory.ok()) return memory.status().WithContext(api);
  void* local = reinterpret_cast<void*>((*memory)->local());
  impl_->registered.push_back(std::move(memory).value());
  return local;
}

Status Communicator::AsyncError() const { return impl_->AsyncError(); }

Status Communicator::Synchronize(void* stream) {
  KILN_RETURN_IF_ERROR(impl_->CheckContext("kiln::comm::Communicator::Synchronize"));
  KILN_RETURN_IF_ERROR(
      impl_->driver->Check(impl_->driver->cuStreamSynchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize"));
  return impl_->AsyncError();
}

const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto: return "auto";
    case AllReduceAlgorithm::kOneShot: return "one_shot";
    case AllReduceAlgorithm::kTwoShot: return "two_shot";
  }
  return "unknown";
}

}  // namespace kiln::comm
