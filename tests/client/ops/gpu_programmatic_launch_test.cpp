// [gpu] The first wave's ops launched as programmatic dependents (KILN_PDL, on by default on
// sm_90+): each kernel may start while the one before it on the stream runs, and waits
// (griddepcontrol.wait) before it touches memory. A chain of fused_add_rms_norm, rms_norm into
// both halves of a gate/up buffer, silu_and_mul and apply_rope, round after round over the same
// buffers, has both hazards the wait must stop: a call reads what the call before it wrote, and
// overwrites what calls before it read. Run back to back on one stream and replayed from a CUDA
// graph with the launches programmatic, the buffers must equal, bit for bit, the same calls run
// with KILN_PDL forced off and a full synchronization after each. At 1 token (launch-bound: the
// overlap is largest) and 300 tokens (several waves). On a GPU below sm_90 the launches are plain
// and the test still holds.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "client/core/loader/programmatic_launch.h"
#include "kiln/kiln.h"
#include "kiln/ops/activation.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/rope.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::DeviceBuffer;

constexpr int64_t kHidden = 4096;
constexpr int64_t kHeads = 32;  // h and r seen as [tokens, 32, 128] for the rotation
constexpr int64_t kHeadDim = kHidden / kHeads;
constexpr int kRounds = 6;

struct Chain {
  explicit Chain(int64_t tokens, std::mt19937& rng) : tokens(tokens) {
    const auto n = static_cast<size_t>(tokens * kHidden);
    h0 = kiln::testing::RandomTensor(DType::kBFloat16, n, rng).bytes;
    r0 = kiln::testing::RandomTensor(DType::kBFloat16, n, rng).bytes;
    h = std::make_unique<DeviceBuffer>(n * 2);
    r = std::make_unique<DeviceBuffer>(n * 2);
    x = std::make_unique<DeviceBuffer>(2 * n * 2);
    w = std::make_unique<DeviceBuffer>(static_cast<size_t>(kHidden) * 2);
    w->Upload(kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(kHidden), rng, 0.5f, 1.5f).bytes);
    std::vector<int32_t> pos(static_cast<size_t>(tokens));
    std::uniform_int_distribution<int32_t> any(0, 8191);
    for (auto& p : pos) p = any(rng);
    positions = kiln::testing::UploadInts(pos);
  }

  void Reset() {
    h->Upload(h0);
    r->Upload(r0);
    x->Poison();
  }

  // One round: r <- h + r, h <- norm(r) w; x[:, :H] <- norm(h) w, x[:, H:] <- norm(r) w;
  // h <- silu(x[:, :H]) * x[:, H:]; rotate h and r as q and k.
  bool Round(void* stream) const {
    const TensorView hv = TensorView::Contiguous(h->data(), DType::kBFloat16, {tokens, kHidden});
    const TensorView rv = TensorView::Contiguous(r->data(), DType::kBFloat16, {tokens, kHidden});
    const TensorView wv = TensorView::Contiguous(w->data(), DType::kBFloat16, {kHidden});
    const TensorView xv = TensorView::Contiguous(x->data(), DType::kBFloat16, {tokens, 2 * kHidden});
    char* x_up = x->data() + kHidden * 2;  // the up half: H bf16 elements in
    const TensorView gate = TensorView::Strided(x->data(), DType::kBFloat16, {tokens, kHidden}, {2 * kHidden, 1});
    const TensorView up = TensorView::Strided(x_up, DType::kBFloat16, {tokens, kHidden}, {2 * kHidden, 1});
    const TensorView q = TensorView::Contiguous(h->data(), DType::kBFloat16, {tokens, kHeads, kHeadDim});
    const TensorView k = TensorView::Contiguous(r->data(), DType::kBFloat16, {tokens, kHeads, kHeadDim});
    const TensorView pos = kiln::testing::IntView(*positions, static_cast<size_t>(tokens));
    return kiln::ops::fused_add_rms_norm(hv, rv, wv, 1e-6, stream).ok() &&
           kiln::ops::rms_norm(gate, hv, wv, 1e-6, stream).ok() && kiln::ops::rms_norm(up, rv, wv, 1e-6, stream).ok() &&
           kiln::ops::silu_and_mul(hv, xv, stream).ok() &&
           kiln::ops::apply_rope(q, k, pos, kiln::ops::RopeOptions{}, stream).ok();
  }

  std::vector<uint8_t> State() const {
    std::vector<uint8_t> all = h->Download();
    const std::vector<uint8_t> rr = r->Download();
    const std::vector<uint8_t> xx = x->Download();
    all.insert(all.end(), rr.begin(), rr.end());
    all.insert(all.end(), xx.begin(), xx.end());
    return all;
  }

  int64_t tokens;
  std::vector<uint8_t> h0, r0;
  std::unique_ptr<DeviceBuffer> h, r, x, w, positions;
};

TEST_CASE("the first wave's ops launched back to back as programmatic dependents read and overwrite only finished work",
          "[gpu][client][ops][pdl]") {
  kiln::testing::GpuSession session;
  const auto& driver = kiln::testing::Driver();
  auto& pdl = kiln::client::OpProgrammaticLaunchSwitch();
  struct Restore {
    ~Restore() { kiln::client::OpProgrammaticLaunchSwitch().SetForTesting(-1); }
  } restore;
  std::mt19937 rng(17);
  CUstream stream = nullptr;
  KILN_CU(driver.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int64_t tokens : {1, 300}) {
    INFO("tokens " << tokens);
    Chain chain(tokens, rng);

    // The reference: plain launches, each call finished before the next.
    pdl.SetForTesting(0);
    chain.Reset();
    for (int round = 0; round < kRounds; ++round) {
      REQUIRE(chain.Round(stream));
      KILN_CU(driver.cuStreamSynchronize(stream));
    }
    const std::vector<uint8_t> want = chain.State();
    {
      kiln::testing::HostTensor h{DType::kBFloat16, chain.h->Download()};
      size_t finite = 0;
      for (size_t e = 0; e < h.size(); ++e) finite += std::isfinite(h.Get(e)) ? 1 : 0;
      INFO("the chain's values stay finite");
      REQUIRE(finite == h.size());
    }

    pdl.SetForTesting(1);
    for (int run = 0; run < 3; ++run) {
      chain.Reset();
      for (int round = 0; round < kRounds; ++round) REQUIRE(chain.Round(stream));
      KILN_CU(driver.cuStreamSynchronize(stream));
      INFO("back to back on one stream, run " << run);
      CHECK(chain.State() == want);
    }

    CUgraph graph = nullptr;
    KILN_CU(driver.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
    bool captured = true;
    for (int round = 0; round < kRounds; ++round) captured = captured && chain.Round(stream);
    KILN_CU(driver.cuStreamEndCapture(stream, &graph));
    REQUIRE(captured);
    CUgraphExec exec = nullptr;
    KILN_CU(driver.cuGraphInstantiateWithFlags(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      chain.Reset();
      KILN_CU(driver.cuGraphLaunch(exec, stream));
      KILN_CU(driver.cuStreamSynchronize(stream));
      INFO("CUDA graph replay " << replay);
      CHECK(chain.State() == want);
    }
    KILN_CU(driver.cuGraphExecDestroy(exec));
    KILN_CU(driver.cuGraphDestroy(graph));
  }
  KILN_CU(driver.cuStreamDestroy(stream));
}

}  // namespace
