// The host-side choices of kiln::comm that need no GPU: argument checks of the collectives,
// the launch shape every rank must compute alike, the algorithm crossover, and the
// communicator's and C ABI's refusals of bad arguments before any driver or socket work.
#include <catch2/catch.hpp>

#include "client/comm/all_reduce_plan.h"
#include "kiln/comm.h"
#include "kiln/comm/comm_contract.h"

namespace kiln::client::comm {
namespace {

using ::kiln::comm::AllReduceAlgorithm;
using ::kiln::comm::AllReduceGrid;

TensorView Vec1D(uintptr_t address, DType dtype, int64_t n, int device = 0) {
  return TensorView::Contiguous(reinterpret_cast<void*>(address), dtype, {n}, Device::CUDA(device));
}

TEST_CASE("PlanAllReduce accepts dense tensors of one shape and dtype, in place too", "[comm][plan]") {
  auto plan = PlanAllReduce(Vec1D(0x10000, DType::kBFloat16, 4097), Vec1D(0x20000, DType::kBFloat16, 4097));
  REQUIRE(plan.ok());
  CHECK(plan->n == 4097);
  CHECK(plan->element_size == 2);
  auto in_place = PlanAllReduce(Vec1D(0x10000, DType::kFloat32, 100), Vec1D(0x10000, DType::kFloat32, 100));
  CHECK(in_place.ok());
  auto two_d = PlanAllReduce(TensorView::Contiguous(reinterpret_cast<void*>(0x40000), DType::kFloat16, {3, 5}),
                             TensorView::Contiguous(reinterpret_cast<void*>(0x80000), DType::kFloat16, {3, 5}));
  REQUIRE(two_d.ok());
  CHECK(two_d->n == 15);
  auto empty = PlanAllReduce(Vec1D(0, DType::kFloat32, 0), Vec1D(0, DType::kFloat32, 0));
  REQUIRE(empty.ok());
  CHECK(empty->n == 0);
}

TEST_CASE("PlanAllReduce refuses what the kernels cannot do, saying what was wrong", "[comm][plan]") {
  auto check = [](const TensorView& out, const TensorView& in, const std::string& words) {
    auto plan = PlanAllReduce(out, in);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(plan.status().message(), Catch::Contains(words));
  };
  check(Vec1D(0x10000, DType::kInt32, 8), Vec1D(0x20000, DType::kInt32, 8), "expected fp32, fp16 or bf16");
  check(Vec1D(0x10000, DType::kFloat32, 8), Vec1D(0x20000, DType::kFloat32, 9), "expected shape [9]");
  check(Vec1D(0x10000, DType::kFloat16, 8), Vec1D(0x20000, DType::kFloat32, 8), "expected dtype fp32");
  check(Vec1D(0x10000, DType::kFloat32, 8, 1), Vec1D(0x20000, DType::kFloat32, 8, 0), "one device");
  check(Vec1D(0x10004, DType::kFloat32, 8), Vec1D(0x10000, DType::kFloat32, 8), "overlap");
  check(Vec1D(0x10000, DType::kFloat32, 8),
        TensorView::Strided(reinterpret_cast<void*>(0x20000), DType::kFloat32, {4, 2}, {4, 1}), "dense");
  check(Vec1D(0x10000, DType::kFloat32, 8),
        TensorView::Contiguous(reinterpret_cast<void*>(0x20000), DType::kFloat32, {8}, Device::CPU()), "in");
}

TEST_CASE("PlanAddRmsNorm checks shapes, hidden, eps and overlaps", "[comm][plan]") {
  auto t = [](uintptr_t a, std::initializer_list<int64_t> shape, DType d = DType::kBFloat16) {
    return TensorView::Contiguous(reinterpret_cast<void*>(a), d, shape);
  };
  auto ok = PlanAddRmsNorm(t(0x100000, {3, 4096}), t(0x200000, {3, 4096}), t(0x300000, {3, 4096}), t(0x400000, {4096}),
                           1e-6);
  REQUIRE(ok.ok());
  CHECK(ok->rows == 3);
  CHECK(ok->hidden == 4096);
  auto refuse = [](StatusOr<AddRmsNormPlan> plan, const std::string& words) {
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(plan.status().message(), Catch::Contains(words));
  };
  refuse(PlanAddRmsNorm(t(0x100000, {2, 16385}), t(0x200000, {2, 16385}), t(0x300000, {2, 16385}), t(0x400000, {16385}),
                        1e-6),
         "hidden size");
  refuse(PlanAddRmsNorm(t(0x100000, {2, 64}), t(0x200000, {2, 64}), t(0x300000, {2, 64}), t(0x400000, {32}), 1e-6),
         "weight: expected shape [64]");
  refuse(PlanAddRmsNorm(t(0x100000, {2, 64}), t(0x200000, {2, 64}), t(0x300000, {2, 64}), t(0x400000, {64}), 0.0),
         "eps");
  refuse(PlanAddRmsNorm(t(0x100000, {2, 64}), t(0x200000, {2, 64}), t(0x200000, {2, 64}), t(0x400000, {64}), 1e-6),
         "overlap");
  refuse(PlanAddRmsNorm(t(0x100000, {2, 64}), t(0x200000, {2, 64}), t(0x300000, {2, 64}),
                        t(0x400000, {64}, DType::kFloat16), 1e-6),
         "weight: expected dtype bf16");
}

TEST_CASE("the launch shape depends only on what every rank shares", "[comm][plan]") {
  // One thread per vector a rank reduces, blocks of 512, at most max_blocks.
  CHECK(AllReduceGrid(1, 8, 2, false, 512, 64) == 1);
  CHECK(AllReduceGrid(8 * 512, 8, 2, false, 512, 64) == 1);
  CHECK(AllReduceGrid(8 * 512 + 8, 8, 2, false, 512, 64) == 2);
  CHECK(AllReduceGrid(8 * 512 * 2, 8, 2, true, 512, 64) == 1);  // two-shot: half each
  CHECK(AllReduceGrid(int64_t{1} << 30, 8, 2, false, 512, 64) == 64);
  CHECK(AllReduceGrid(int64_t{1} << 30, 8, 8, true, 512, 64) == 64);

  CHECK(AlignedVec(2, {0x1000, 0x2000}) == 8);
  CHECK(AlignedVec(2, {0x1000, 0x2008}) == 4);
  CHECK(AlignedVec(2, {0x1002}) == 1);
  CHECK(AlignedVec(4, {0x1000}) == 4);
}

TEST_CASE("Auto picks one-shot for small messages and two-shot above the crossover", "[comm][plan]") {
  for (int world : {2, 4, 8}) {
    const size_t crossover = ::kiln::comm::OneShotMaxBytes(world);
    CHECK(crossover > 0);
    CHECK(ResolveAlgorithm(AllReduceAlgorithm::kAuto, 4096, world) == AllReduceAlgorithm::kOneShot);
    CHECK(ResolveAlgorithm(AllReduceAlgorithm::kAuto, crossover, world) == AllReduceAlgorithm::kOneShot);
    CHECK(ResolveAlgorithm(AllReduceAlgorithm::kAuto, crossover + 1, world) == AllReduceAlgorithm::kTwoShot);
    // A forced choice is kept (a diagnostic control).
    CHECK(ResolveAlgorithm(AllReduceAlgorithm::kTwoShot, 16, world) == AllReduceAlgorithm::kTwoShot);
    CHECK(ResolveAlgorithm(AllReduceAlgorithm::kOneShot, size_t{1} << 30, world) == AllReduceAlgorithm::kOneShot);
  }
  CHECK(::kiln::comm::OneShotMaxBytes(8) <= ::kiln::comm::OneShotMaxBytes(2));
  CHECK(std::string(::kiln::comm::AllReduceAlgorithmName(AllReduceAlgorithm::kTwoShot)) == "two_shot");
}

TEST_CASE("Communicator::Create refuses bad arguments before touching a GPU or a socket", "[comm]") {
  using ::kiln::comm::Communicator;
  auto refuse = [](StatusOr<std::unique_ptr<Communicator>> c, const std::string& words) {
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(c.status().message(), Catch::Contains(words));
  };
  refuse(Communicator::Create(0, 0, "@x"), "world_size must be 1..8");
  refuse(Communicator::Create(0, 9, "@x"), "world_size must be 1..8");
  refuse(Communicator::Create(2, 2, "@x"), "rank must be 0..1");
  refuse(Communicator::Create(-1, 2, "@x"), "rank must be 0..1");
  refuse(Communicator::Create(0, 2, ""), "rendezvous address is empty");
  ::kiln::comm::CommOptions small;
  small.buffer_bytes = 1000;
  refuse(Communicator::Create(0, 2, "@x", small), "buffer_bytes must be 1 MiB");
  ::kiln::comm::CommOptions negative;
  negative.kernel_timeout = std::chrono::milliseconds(-1);
  refuse(Communicator::Create(0, 2, "@x", negative), "kernel_timeout");
}

TEST_CASE("the C ABI of kiln::comm refuses NULLs and bad options with a message", "[comm][c_abi]") {
  kiln_comm* comm = reinterpret_cast<kiln_comm*>(0x1);
  CHECK(kiln_comm_create(0, 2, "@x", nullptr, nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(kiln_last_error(), Catch::Contains("NULL"));
  kiln_comm_options options;
  kiln_comm_options_init(&options);
  CHECK(options.struct_size == sizeof(kiln_comm_options));
  CHECK(options.buffer_bytes == size_t{64} << 20);
  options.struct_size = 4;
  CHECK(kiln_comm_create(0, 2, "@x", &options, &comm) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(kiln_last_error(), Catch::Contains("struct_size"));
  CHECK(comm == nullptr);
  CHECK(kiln_comm_create(5, 2, "@x", nullptr, &comm) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(kiln_last_error(), Catch::Contains("rank must be"));
  CHECK(kiln_all_reduce(nullptr, nullptr, nullptr, KILN_ALL_REDUCE_AUTO, nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(kiln_last_error(), Catch::Contains("comm is NULL"));
  CHECK(kiln_comm_synchronize(nullptr, nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(kiln_comm_async_error(nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  void* p = nullptr;
  CHECK(kiln_comm_alloc_registered(nullptr, 16, &p) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(kiln_comm_rank(nullptr) == -1);
  CHECK(kiln_comm_world_size(nullptr) == -1);
  kiln_comm_destroy(nullptr);  // ignored
}

TEST_CASE("FromEnvironment says which launcher variable is missing or wrong", "[comm]") {
  unsetenv("KILN_WORLD_SIZE");
  auto c = ::kiln::comm::Communicator::FromEnvironment();
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("KILN_WORLD_SIZE is not set"));
  setenv("KILN_WORLD_SIZE", "2", 1);
  setenv("KILN_RANK", "7", 1);
  c = ::kiln::comm::Communicator::FromEnvironment();
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("KILN_RANK='7' is not an integer in 0..1"));
  unsetenv("KILN_WORLD_SIZE");
  unsetenv("KILN_RANK");
}

}  // namespace
}  // namespace kiln::client::comm
