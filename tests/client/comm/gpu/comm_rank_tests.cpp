// The multi-GPU checks, run on every rank at once: `kiln-launch -n 2 kiln_comm_rank_tests`
// (started by tests/client/comm/gpu/multi_gpu_test.cpp with a real kilnd). Every TEST_CASE is
// collective — all ranks run the same cases in the same order — so a rank must never skip a
// call its peers make; checks use CHECK (not REQUIRE) around collectives for that reason.
// Outputs are poisoned (NaN) before each call and compared with the exact fp32 rank-order sum
// and with a float64 reference.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "tests/client/comm/gpu/rank_session.h"

namespace kiln::testing {
namespace {

using comm::AllReduceAlgorithm;

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr AllReduceAlgorithm kAlgorithms[] = {AllReduceAlgorithm::kOneShot, AllReduceAlgorithm::kTwoShot,
                                              AllReduceAlgorithm::kAuto};

TensorView View(void* data, DType dtype, int64_t count, int device) {
  return TensorView::Contiguous(data, dtype, {count}, Device::CUDA(device));
}

// One all-reduce of `count` elements at byte offsets in_offset / out_offset into fresh
// buffers (in place when out_offset < 0), checked.
void CheckAllReduce(DType dtype, size_t count, AllReduceAlgorithm algorithm, uint64_t seed, size_t in_offset = 0,
                    long out_offset = 64) {
  RankSession& s = Session();
  const size_t bytes = count * DTypeSize(dtype);
  DeviceBuffer in(bytes + in_offset + 256);
  DeviceBuffer out(bytes + 512);
  out.Poison();
  in.Poison();
  char* in_ptr = in.data() + in_offset;
  char* out_ptr = out_offset < 0 ? in_ptr : out.data() + out_offset;
  Upload(in_ptr, RankInput(dtype, count, seed, s.rank));
  Status status = s.comm->AllReduce(View(out_ptr, dtype, static_cast<int64_t>(count), s.device),
                                    View(in_ptr, dtype, static_cast<int64_t>(count), s.device), nullptr, algorithm);
  INFO(comm::AllReduceAlgorithmName(algorithm) << " " << DTypeName(dtype) << " n=" << count);
  CHECK(status.message() == "");
  Status synced = s.comm->Synchronize();
  CHECK(synced.message() == "");
  ExpectAllReduced(Download(dtype, out_ptr, count), dtype, seed, s.world, comm::AllReduceAlgorithmName(algorithm));
}

TEST_CASE("all-reduce: every dtype and algorithm, awkward sizes, exact and float64-close", "[all_reduce]") {
  uint64_t seed = 1;
  for (DType dtype : kDTypes)
    for (AllReduceAlgorithm algorithm : kAlgorithms)
      for (size_t count : {size_t{1}, size_t{2}, size_t{7}, size_t{8}, size_t{9}, size_t{255}, size_t{1000},
                           size_t{4097}, size_t{65537}, size_t{(1 << 20) + 3}, size_t{3000001}})
        CheckAllReduce(dtype, count, algorithm, seed++);
}

TEST_CASE("all-reduce: in place, and pointers that are not 16-byte aligned", "[all_reduce]") {
  uint64_t seed = 1000;
  for (DType dtype : kDTypes)
    for (AllReduceAlgorithm algorithm : {AllReduceAlgorithm::kOneShot, AllReduceAlgorithm::kTwoShot}) {
      for (size_t count : {size_t{1}, size_t{4099}, size_t{300001}})
        CheckAllReduce(dtype, count, algorithm, seed++, 0, /*in place*/ -1);
      const size_t es = DTypeSize(dtype);
      for (size_t count : {size_t{13}, size_t{100003}}) {
        CheckAllReduce(dtype, count, algorithm, seed++, es, 64);           // misaligned in
        CheckAllReduce(dtype, count, algorithm, seed++, 0, long(3 * es));  // misaligned out
        CheckAllReduce(dtype, count, algorithm, seed++, es, -1);           // both, in place
      }
    }
}

TEST_CASE("all-reduce: messages larger than the staging buffer, up to 256 MiB", "[all_reduce][large]") {
  // The staging buffer is 8 MiB here, so these go in 2 .. 32 pieces.
  CheckAllReduce(DType::kBFloat16, (size_t{20} << 20) + 5, AllReduceAlgorithm::kAuto, 2000);
  CheckAllReduce(DType::kFloat16, size_t{9} << 20, AllReduceAlgorithm::kOneShot, 2001);
  CheckAllReduce(DType::kFloat32, size_t{64} << 20, AllReduceAlgorithm::kAuto, 2002);  // 256 MiB
}

TEST_CASE("all-reduce: back-to-back calls of changing sizes reuse the barrier flags", "[all_reduce]") {
  RankSession& s = Session();
  const DType dtype = DType::kBFloat16;
  const size_t sizes[] = {1, 4096, 100000, 1 << 20, 17, 777777};
  constexpr int kCalls = 60;
  std::vector<std::unique_ptr<DeviceBuffer>> ins, outs;
  for (int k = 0; k < kCalls; ++k) {
    const size_t count = sizes[k % 6];
    ins.push_back(std::make_unique<DeviceBuffer>(count * 2));
    outs.push_back(std::make_unique<DeviceBuffer>(count * 2));
    outs.back()->Poison();
    Upload(ins.back()->data(), RankInput(dtype, count, 3000 + k, s.rank));
  }
  // All launched without waiting in between: one stream orders them.
  for (int k = 0; k < kCalls; ++k) {
    const int64_t count = static_cast<int64_t>(sizes[k % 6]);
    Status status = s.comm->AllReduce(View(outs[k]->data(), dtype, count, s.device),
                                      View(ins[k]->data(), dtype, count, s.device), nullptr,
                                      k % 3 == 0 ? AllReduceAlgorithm::kTwoShot : AllReduceAlgorithm::kAuto);
    CHECK(status.message() == "");
  }
  CHECK(s.comm->Synchronize().message() == "");
  for (int k = 0; k < kCalls; ++k)
    ExpectAllReduced(Download(dtype, outs[k]->data(), sizes[k % 6]), dtype, 3000 + k, s.world, "back-to-back");
}

TEST_CASE("all-reduce: an input in a registered buffer is read in place by the peers", "[all_reduce][registered]") {
  RankSession& s = Session();
  auto registered = s.comm->AllocateRegistered(size_t{6} << 20);
  CHECK(registered.status().message() == "");
  if (!registered.ok()) return;  // every rank fails alike here
  char* base = static_cast<char*>(*registered);
  uint64_t seed = 4000;
  for (DType dtype : kDTypes)
    for (AllReduceAlgorithm algorithm : kAlgorithms)
      for (size_t count : {size_t{1}, size_t{4097}, size_t{1} << 20}) {
        const size_t offset = 4096;  // the same on every rank
        Upload(base + offset, RankInput(dtype, count, seed, s.rank));
        DeviceBuffer out(count * DTypeSize(dtype) + 16);
        out.Poison();
        Status status = s.comm->AllReduce(View(out.data(), dtype, static_cast<int64_t>(count), s.device),
                                          View(base + offset, dtype, static_cast<int64_t>(count), s.device), nullptr,
                                          algorithm);
        CHECK(status.message() == "");
        CHECK(s.comm->Synchronize().message() == "");
        ExpectAllReduced(Download(dtype, out.data(), count), dtype, seed++, s.world, "registered");
      }
  // In place on a registered buffer would race with the peers' reads: refused on every rank.
  Status in_place = s.comm->AllReduce(View(base, DType::kFloat32, 1024, s.device),
                                      View(base, DType::kFloat32, 1024, s.device));
  CHECK(in_place.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(in_place.message(), Catch::Contains("registered input buffer"));
}

TEST_CASE("fused all-reduce + residual add + RMSNorm matches the float64 reference", "[all_reduce_add_rmsnorm]") {
  RankSession& s = Session();
  uint64_t seed = 5000;
  for (DType dtype : kDTypes)
    for (int64_t hidden : {int64_t{1}, int64_t{7}, int64_t{128}, int64_t{4096}, int64_t{5120}, int64_t{16384}})
      for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{257}}) {
        const size_t n = static_cast<size_t>(rows * hidden);
        const size_t es = DTypeSize(dtype);
        const double eps = 1e-6;
        const uint64_t case_seed = seed++;
        HostTensor residual = RankInput(dtype, n, case_seed + 100000, 0);  // equal on every rank
        HostTensor weight = RankInput(dtype, static_cast<size_t>(hidden), case_seed + 200000, 0);
        DeviceBuffer in_d(n * es), res_d(n * es), w_d(static_cast<size_t>(hidden) * es), out_d(n * es);
        Upload(in_d.data(), RankInput(dtype, n, case_seed, s.rank));
        Upload(res_d.data(), residual);
        Upload(w_d.data(), weight);
        out_d.Poison();
        auto view2d = [&](char* p) { return TensorView::Contiguous(p, dtype, {rows, hidden}, Device::CUDA(s.device)); };
        Status status = s.comm->AllReduceAddRmsNorm(
            view2d(out_d.data()), view2d(in_d.data()), view2d(res_d.data()),
            TensorView::Contiguous(w_d.data(), dtype, {hidden}, Device::CUDA(s.device)), eps);
        INFO(DTypeName(dtype) << " rows=" << rows << " hidden=" << hidden);
        CHECK(status.message() == "");
        CHECK(s.comm->Synchronize().message() == "");

        const HostTensor got_res = Download(dtype, res_d.data(), n);
        const HostTensor got_out = Download(dtype, out_d.data(), n);
        std::vector<HostTensor> inputs;
        for (int r = 0; r < s.world; ++r) inputs.push_back(RankInput(dtype, n, case_seed, r));
        const Tolerance tolerance = ToleranceFor(dtype);
        size_t bad_res = 0, bad_out = 0;
        for (int64_t row = 0; row < rows; ++row) {
          std::vector<double> x(static_cast<size_t>(hidden));
          double squares = 0;
          for (int64_t h = 0; h < hidden; ++h) {
            const size_t i = static_cast<size_t>(row * hidden + h);
            float sum = 0.f;
            for (int r = 0; r < s.world; ++r) sum += inputs[static_cast<size_t>(r)].Get(i);
            const float exact = RoundTo(dtype, sum + residual.Get(i));  // the kernels' rounding
            if (!(got_res.Get(i) == exact)) ++bad_res;
            x[static_cast<size_t>(h)] = exact;
            squares += double(exact) * exact;
          }
          const double scale = 1.0 / std::sqrt(squares / static_cast<double>(hidden) + eps);
          for (int64_t h = 0; h < hidden; ++h) {
            const size_t i = static_cast<size_t>(row * hidden + h);
            const double want = x[static_cast<size_t>(h)] * scale * weight.Get(static_cast<size_t>(h));
            if (!Close(got_out.Get(i), want, tolerance)) ++bad_out;
          }
        }
        CHECK(bad_res == 0);
        CHECK(bad_out == 0);
      }
}

// Not in the default run: the outer test runs it on its own, because it ends rank 1.
TEST_CASE("a rank that dies makes the others fail with a clear error, not hang", "[.][death]") {
  RankSession& s = Session();
  const DType dtype = DType::kFloat32;
  DeviceBuffer in(4096 * 4), out(4096 * 4);
  Upload(in.data(), RankInput(dtype, 4096, 1, s.rank));
  auto call = [&] {
    return s.comm->AllReduce(View(out.data(), dtype, 4096, s.device), View(in.data(), dtype, 4096, s.device));
  };
  REQUIRE(call().ok());
  REQUIRE(s.comm->Synchronize().ok());
  if (s.rank == s.world - 1) {
    std::printf("rank %d: killing itself with SIGKILL\n", s.rank);
    std::fflush(stdout);
    raise(SIGKILL);
  }
  const auto start = std::chrono::steady_clock::now();
  Status error;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    Status launched = call();
    Status synced = launched.ok() ? s.comm->Synchronize() : launched;
    if (!synced.ok()) {
      error = synced;
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d: error after %.2f s: %s\n", s.rank, seconds, error.message().c_str());
  REQUIRE(!error.ok());
  CHECK(seconds < 15);
  CHECK_THAT(error.message(), Catch::Contains("rank " + std::to_string(s.world - 1)));
  // And it stays failed, without touching the GPU.
  CHECK(call().code() == error.code());
  std::printf("PEER-LOSS-DETECTED rank %d\n", s.rank);
}

// Not in the default run: the peers stay alive but the last rank does not make the call.
TEST_CASE("a rank that does not make the call makes the others time out, not hang", "[.][timeout]") {
  RankSession& s = Session();
  comm::CommOptions options;
  options.buffer_bytes = size_t{1} << 20;
  options.kernel_timeout = std::chrono::milliseconds(1500);
  const char* address = std::getenv("KILN_COMM_ADDRESS");
  auto c = comm::Communicator::Create(s.rank, s.world, std::string(address) + "-timeout", options);
  REQUIRE(c.ok());
  DeviceBuffer in(1024 * 4), out(1024 * 4);
  Upload(in.data(), RankInput(DType::kFloat32, 1024, 1, s.rank));
  if (s.rank == s.world - 1) {
    std::this_thread::sleep_for(std::chrono::seconds(4));  // alive, but never calls
  } else {
    const auto start = std::chrono::steady_clock::now();
    REQUIRE((*c)->AllReduce(View(out.data(), DType::kFloat32, 1024, s.device),
                            View(in.data(), DType::kFloat32, 1024, s.device))
                .ok());
    Status synced = (*c)->Synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank %d: after %.2f s: %s\n", s.rank, seconds, synced.message().c_str());
    CHECK(synced.code() == StatusCode::kDeadlineExceeded);
    CHECK(seconds < 10);
    CHECK_THAT(synced.message(), Catch::Contains("rank " + std::to_string(s.world - 1)));
    std::printf("PEER-TIMEOUT-DETECTED rank %d\n", s.rank);
  }
}

}  // namespace
}  // namespace kiln::testing
