#include "tests/client/comm/gpu/rank_session.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/core/api/float16.h"

namespace kiln::testing {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? std::atoi(text) : fallback;
}

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

float Value(uint64_t seed, int rank, size_t i) {
  const uint64_t h = Mix(seed * 0x100000001b3ull ^ Mix(static_cast<uint64_t>(rank) << 48 ^ i));
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 24) * 4.0 - 2.0);
}

}  // namespace

RankSession& Session() {
  static RankSession* session = [] {
    auto* s = new RankSession();
    s->world = EnvInt("KILN_WORLD_SIZE", 1);
    s->rank = EnvInt("KILN_RANK", 0);
    s->device = EnvInt("KILN_LOCAL_RANK", 0);
    RequireGpus(s->world, 80);
    const auto& d = Driver();
    CUdevice device = 0;
    KILN_CU(d.cuDeviceGet(&device, s->device));
    KILN_CU(d.cuDevicePrimaryCtxRetain(&s->context, device));
    KILN_CU(d.cuCtxSetCurrent(s->context));
    comm::CommOptions options;
    options.buffer_bytes = static_cast<size_t>(EnvInt("KILN_TEST_COMM_BUFFER_MB", 8)) << 20;
    options.kernel_timeout = std::chrono::seconds(20);
    auto c = comm::Communicator::FromEnvironment(options);
    if (!c.ok()) FAIL("rank " << s->rank << ": " << c.status().message());
    s->comm = std::move(c).value();
    std::printf("rank %d of %d on cuda:%d\n", s->rank, s->world, s->device);
    return s;
  }();
  KILN_CU(Driver().cuCtxSetCurrent(session->context));
  return *session;
}

float RoundTo(DType dtype, float v) {
  switch (dtype) {
    case DType::kFloat16: return client::HalfToFloat(client::FloatToHalf(v));
    case DType::kBFloat16: return client::BFloat16ToFloat(client::FloatToBFloat16(v));
    default: return v;
  }
}

HostTensor RankInput(DType dtype, size_t count, uint64_t seed, int rank) {
  HostTensor t = MakeHostTensor(dtype, count);
  for (size_t i = 0; i < count; ++i) t.Set(i, Value(seed, rank, i));
  return t;
}

void Upload(char* device, const HostTensor& host) {
  KILN_CU(Driver().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(device), host.bytes.data(), host.bytes.size()));
}

HostTensor Download(DType dtype, const char* device, size_t count) {
  HostTensor t = MakeHostTensor(dtype, count);
  KILN_CU(Driver().cuMemcpyDtoH(t.bytes.data(), reinterpret_cast<CUdeviceptr>(device), t.bytes.size()));
  return t;
}

void ExpectAllReduced(const HostTensor& got, DType dtype, uint64_t seed, int world, const char* what) {
  const size_t count = got.size();
  const Tolerance tolerance = ToleranceFor(dtype);
  size_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < count; ++i) {
    float exact = 0.f;  // the kernels' arithmetic: fp32, rank order, one rounding
    double reference = 0;
    for (int r = 0; r < world; ++r) {
      const float x = RoundTo(dtype, Value(seed, r, i));
      exact += x;
      reference += x;
    }
    exact = RoundTo(dtype, exact);
    const float g = got.Get(i);
    if (!(g == exact) || !Close(g, reference, tolerance)) {
      if (++mismatches <= 5)
        first += " [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(exact) +
                 " (float64 " + std::to_string(reference) + ");";
    }
  }
  INFO(what << ": " << DTypeName(dtype) << " n=" << count << ", " << mismatches << " elements differ:" << first);
  CHECK(mismatches == 0);
}

}  // namespace kiln::testing
