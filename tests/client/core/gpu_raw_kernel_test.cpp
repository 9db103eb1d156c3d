// [gpu] The raw-kernel API: your own source (LoadSource) and an op module (LoadOp) loaded,
// looked up and launched with your own arguments; modules cached in process.
#include <catch2/catch.hpp>

#include <cmath>

#include "kiln/client.h"
#include "kiln/kernel.h"
#include "kiln/norm/norm_contract.h"
#include "tests/support/gpu_harness.h"
#include "tests/support/kiln_rpc.h"

namespace {

using kiln::DType;
using kiln::testing::DeviceBuffer;
using kiln::testing::HostTensor;

TEST_CASE("LoadSource compiles, loads and launches your own kernel", "[gpu][client][raw]") {
  kiln::testing::GpuSession session;
  kiln::SourceRequest source{"vadd", kiln::testing::VaddSource(), {"vadd"}, {"-DN=3"}, {}};
  const auto s0 = kiln::GetClientStats();
  auto module = kiln::LoadSource(source);
  INFO(module.status().ToString());
  REQUIRE(module.ok());
  CHECK(module->info().arch.rfind(session.gpu().arch, 0) == 0);
  CHECK(module->entries() == std::vector<std::string>{"vadd"});
  auto missing = module->kernel("vsub");
  CHECK(missing.status().code() == kiln::StatusCode::kNotFound);
  CHECK(missing.status().message().find("(it has: vadd)") != std::string::npos);
  auto kernel = module->kernel("vadd");
  REQUIRE(kernel.ok());

  std::mt19937 rng(5);
  const int n = 100000;
  HostTensor a = kiln::testing::RandomTensor(DType::kFloat32, n, rng);
  HostTensor b = kiln::testing::RandomTensor(DType::kFloat32, n, rng);
  DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dc(a.bytes.size());
  da.Upload(a.bytes);
  db.Upload(b.bytes);
  dc.Poison();
  kiln::LaunchConfig config;
  config.grid.x = (n + 255) / 256;
  config.block.x = 256;
  const float* pa = reinterpret_cast<const float*>(da.data());
  const float* pb = reinterpret_cast<const float*>(db.data());
  float* pc = reinterpret_cast<float*>(dc.data());
  auto status = (*kernel)(config, pa, pb, pc, n);
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  HostTensor c{DType::kFloat32, dc.Download()};
  int bad = 0;  // the device may fuse a + b * 3 into one fma: compare with fp32 tolerance
  for (int i = 0; i < n; ++i)
    bad += !kiln::testing::Close(c.Get(i), a.Get(i) + b.Get(i) * 3.0, kiln::testing::ToleranceFor(DType::kFloat32));
  CHECK(bad == 0);

  // The same source again: served from the process's module cache.
  auto again = kiln::LoadSource(source);
  REQUIRE(again.ok());
  const auto s1 = kiln::GetClientStats();
  CHECK(s1.get_kernel_rpcs == s0.get_kernel_rpcs + 1);
  CHECK(s1.modules_loaded == s0.modules_loaded + 1);

  kiln::LaunchConfig empty_grid;
  CHECK((*kernel)(empty_grid, pa, pb, pc, 0).ok());  // 1x1x1 is a valid launch
  empty_grid.grid.x = 0;
  CHECK((*kernel)(empty_grid, pa, pb, pc, 0).code() == kiln::StatusCode::kInvalidArgument);
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
}

TEST_CASE("LoadOp gives the op's module and launch hints for a hand-made launch", "[gpu][client][raw]") {
  kiln::testing::GpuSession session;
  auto module = kiln::LoadOp({"rmsnorm", {{"dtype", "fp32"}, {"hidden", "1024"}}});
  INFO(module.status().ToString());
  REQUIRE(module.ok());
  const auto& launch = module->info().launch;
  REQUIRE(launch.size() == 1);
  REQUIRE(launch[0].entry == "kiln_rmsnorm");
  auto kernel = module->kernel("kiln_rmsnorm");
  REQUIRE(kernel.ok());

  std::mt19937 rng(9);
  const long long rows = 10, hidden = 1024;
  HostTensor x = kiln::testing::RandomTensor(DType::kFloat32, rows * hidden, rng);
  HostTensor w = kiln::testing::RandomTensor(DType::kFloat32, hidden, rng);
  DeviceBuffer dx(x.bytes.size()), dw(w.bytes.size()), dy(x.bytes.size());
  dx.Upload(x.bytes);
  dw.Upload(w.bytes);
  dy.Poison();
  // The op's contract (kiln/norm/norm_contract.h): rows_per_block rows per block, one
  // parameter struct by value.
  const long long rpb = launch[0].items_per_block;
  kiln::LaunchConfig config;
  config.grid.x = static_cast<unsigned>((rows + rpb - 1) / rpb);
  config.block.x = static_cast<unsigned>(launch[0].block);
  const kiln::norm::RmsNormParams params = {dy.data(), dx.data(), dw.data(), rows, hidden, hidden, 1e-6f};
  auto status = (*kernel)(config, params);
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  HostTensor y{DType::kFloat32, dy.Download()};
  int bad = 0;
  for (long long r = 0; r < rows; ++r) {
    double ss = 0;
    for (long long i = 0; i < hidden; ++i) ss += std::pow(x.Get(r * hidden + i), 2);
    const double inv = 1 / std::sqrt(ss / hidden + 1e-6);
    for (long long i = 0; i < hidden; ++i)
      bad += !kiln::testing::Close(y.Get(r * hidden + i), x.Get(r * hidden + i) * inv * w.Get(i),
                                   kiln::testing::ToleranceFor(DType::kFloat32));
  }
  CHECK(bad == 0);
}

}  // namespace
