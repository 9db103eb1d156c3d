// [gpu] kiln::ops::apply_rope and apply_rope_with_cos_sin_cache (and their C ABI) on a real
// GPU against a float64 CPU reference (ReferenceRope): fp16/bf16 x NeoX/GPT-J x head_dim 64,
// 128, 256 x rotary_dim = head_dim and head_dim / 2 x tokens 1, 7, 300 x q/k heads 32/8 and
// 4/4 x int32/int64 positions up to 100000 x with and without Llama-3.1 scaling. q and k are
// strided views into one fused qkv buffer of fresh random data (never zeros); every element
// outside the rotated parts (v, the heads' tails, padding, tokens whose cache position is out
// of range) must keep its bits. Unsupported arguments are refused before anything launches.
// Tolerances (abs and rel): fp16 2e-3, bf16 1.6e-2 (one output rounding; the kernel's angles
// are exact to fp32 rounding at any position).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "kiln/client.h"
#include "kiln/ops/rope.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::ops::Llama31RopeScaling;
using kiln::testing::DeviceBuffer;
using kiln::testing::GpuSession;
using kiln::testing::HostTensor;

constexpr double kPi = 3.14159265358979323846;
constexpr int64_t kMaxTestPosition = 100000;          // apply_rope: positions in [-5, 100000]
constexpr int64_t kCacheRows = kMaxTestPosition + 3;  // the cache op's max_position

// Where q and k sit in the one buffer of a test, in elements.
struct Layout {
  std::string name;
  int64_t q_offset = 0, q_token_stride = 0, q_head_stride = 0;
  int64_t k_offset = 0, k_token_stride = 0, k_head_stride = 0;
  int64_t size = 0;
  int64_t tokens = 0;  // what the layout was made for
};

// qkv [tokens, (q_heads + 2 k_heads) * (head_dim + head_pad) + row_pad], q then k then v, all
// moved `offset` elements into the buffer (misaligning every pointer when odd).
Layout FusedQkv(int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim, int64_t head_pad = 0,
                int64_t row_pad = 0, int64_t offset = 0) {
  const int64_t head = head_dim + head_pad, row = (q_heads + 2 * k_heads) * head + row_pad;
  Layout l;
  l.name = "fused qkv head_pad=" + std::to_string(head_pad) + " row_pad=" + std::to_string(row_pad) +
           " offset=" + std::to_string(offset);
  l.q_offset = offset;
  l.q_token_stride = l.k_token_stride = row;
  l.q_head_stride = l.k_head_stride = head;
  l.k_offset = offset + q_heads * head;
  l.size = offset + tokens * row;
  l.tokens = tokens;
  return l;
}

// q [q_heads, tokens, head_dim] then k [k_heads, tokens, head_dim]: token stride head_dim.
Layout HeadsMajor(int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim) {
  Layout l;
  l.name = "heads-major";
  l.q_token_stride = l.k_token_stride = head_dim;
  l.q_head_stride = l.k_head_stride = tokens * head_dim;
  l.k_offset = q_heads * tokens * head_dim;
  l.size = (q_heads + k_heads) * tokens * head_dim;
  l.tokens = tokens;
  return l;
}

// inv_freq[i] = theta^(-2i / rotary_dim), Llama-3.1 scaled when asked: the published rule.
std::vector<double> InvFreqReference(int64_t rotary_dim, double theta, const std::optional<Llama31RopeScaling>& s) {
  std::vector<double> inv(static_cast<size_t>(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    double w = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
    if (s.has_value()) {
      const double original = static_cast<double>(s->original_max_position);
      const double wavelength = 2 * kPi / w;
      if (wavelength < original / s->high_freq_factor) {
        // unchanged
      } else if (wavelength > original / s->low_freq_factor) {
        w = w / s->factor;
      } else {
        const double smooth = (original / wavelength - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
        w = (1 - smooth) * w / s->factor + smooth * w;
      }
    }
    inv[static_cast<size_t>(i)] = w;
  }
  return inv;
}

// cos/sin of pair i at `position` (false: the position is out of range, the token stays).
using AnglesFn = std::function<bool(int64_t position, int64_t pair, double* cos, double* sin)>;

// The float64 reference of both ops (named by kernels/traces/apply_rope*.json): for every token
// whose position has angles, every head of q then k, and every pair i < rotary_dim / 2 —
// (x1, x2) = NeoX (i, i + rotary_dim/2), GPT-J (2i, 2i + 1) of the head —
// want[x1] = x1 cos - x2 sin, want[x2] = x2 cos + x1 sin, and rotated[] marks them. Every other
// element of the buffer must keep its bits.
void ReferenceRope(const HostTensor& buffer, const Layout& l, int64_t tokens, int64_t q_heads, int64_t k_heads,
                   int64_t rotary_dim, bool interleaved, const std::vector<int64_t>& positions, const AnglesFn& angles,
                   std::vector<double>* want, std::vector<char>* rotated) {
  want->assign(buffer.size(), 0.0);
  rotated->assign(buffer.size(), 0);
  const int64_t half = rotary_dim / 2;
  std::vector<double> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  for (int64_t t = 0; t < tokens; ++t) {
    bool in_range = true;
    for (int64_t i = 0; i < half && in_range; ++i) in_range = angles(positions[t], i, &c[i], &s[i]);
    if (!in_range) continue;
    for (int64_t h = 0; h < q_heads + k_heads; ++h) {
      const int64_t base = h < q_heads ? l.q_offset + t * l.q_token_stride + h * l.q_head_stride
                                       : l.k_offset + t * l.k_token_stride + (h - q_heads) * l.k_head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const size_t e1 = static_cast<size_t>(base + (interleaved ? 2 * i : i));
        const size_t e2 = static_cast<size_t>(base + (interleaved ? 2 * i + 1 : i + half));
        const double x1 = buffer.Get(e1), x2 = buffer.Get(e2);
        (*want)[e1] = x1 * c[i] - x2 * s[i];
        (*want)[e2] = x2 * c[i] + x1 * s[i];
        (*rotated)[e1] = (*rotated)[e2] = 1;
      }
    }
  }
}

// The buffer after the call against the reference: rotated elements within the dtype's
// tolerance, every other element bit-identical; the first problem is reported.
void CheckAgainstReference(const HostTensor& before, const HostTensor& after, const std::vector<double>& want,
                           const std::vector<char>& rotated) {
  const auto tol = kiln::testing::ToleranceFor(before.dtype);
  const size_t es = kiln::DTypeSize(before.dtype);
  int64_t bad = 0, touched = 0, checked = 0;
  std::string first;
  for (size_t i = 0; i < before.size(); ++i) {
    if (rotated[i]) {
      ++checked;
      const double got = after.Get(i);
      if (!kiln::testing::Close(got, want[i], tol) && bad++ == 0)
        first = "element " + std::to_string(i) + ": got " + std::to_string(got) + ", want " + std::to_string(want[i]) +
                " (was " + std::to_string(before.Get(i)) + ")";
    } else if (std::memcmp(after.bytes.data() + i * es, before.bytes.data() + i * es, es) != 0) {
      if (touched++ == 0 && first.empty())
        first = "element " + std::to_string(i) + " outside the rotated parts changed";
    }
  }
  INFO("first problem: " << first);
  CHECK(checked > 0);
  CHECK(bad == 0);
  CHECK(touched == 0);
}

std::vector<uint8_t> PositionBytes(const std::vector<int64_t>& positions, DType dtype) {
  std::vector<uint8_t> bytes(positions.size() * kiln::DTypeSize(dtype));
  for (size_t i = 0; i < positions.size(); ++i) {
    if (dtype == DType::kInt32) {
      const int32_t v = static_cast<int32_t>(positions[i]);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      std::memcpy(bytes.data() + 8 * i, &positions[i], 8);
    }
  }
  return bytes;
}

// Positions of a case: random, with the extremes at fixed tokens. apply_rope: [0, 100000],
// token 0 at 100000, token 2 at -5 (a negative position rotates backwards). Cache op: [0,
// max_position), token 0 at max_position - 1, and, from 7 tokens on, tokens 3 and 5 out of
// range (-1 and max_position): those must stay untouched.
std::vector<int64_t> MakePositions(int64_t tokens, bool cache_op, std::mt19937& rng) {
  const int64_t hi = cache_op ? kCacheRows - 1 : kMaxTestPosition;
  std::uniform_int_distribution<int64_t> uniform(0, hi);
  std::vector<int64_t> p(static_cast<size_t>(tokens));
  for (auto& v : p) v = uniform(rng);
  if (tokens > 0) p[0] = hi;
  if (tokens > 1) p[1] = 0;
  if (!cache_op && tokens > 2) p[2] = -5;
  if (cache_op && tokens >= 7) {
    p[3] = -1;
    p[5] = kCacheRows;
  }
  return p;
}

// cos_sin_cache tables [kCacheRows, rotary_dim] (rows `stride` floats apart), random fp32 in
// [-1, 1] (any values do: the op only indexes them), made and uploaded once per (rotary_dim,
// stride) and shared by the cases of one test. Declared after the GpuSession, so the device
// memory is freed while the context lives.
struct CosSinCache {
  HostTensor host;
  std::unique_ptr<DeviceBuffer> device;
};
class CacheStore {
 public:
  CosSinCache& For(int64_t rotary_dim, int64_t stride) {
    CosSinCache& c = caches_[{rotary_dim, stride}];
    if (!c.device) {
      std::mt19937 rng(static_cast<uint32_t>(rotary_dim * 1000 + stride));
      c.host = kiln::testing::RandomTensor(DType::kFloat32, static_cast<size_t>(kCacheRows * stride), rng, -1.f, 1.f);
      c.device = std::make_unique<DeviceBuffer>(c.host.bytes.size());
      c.device->Upload(c.host.bytes);
    }
    return c;
  }

 private:
  std::map<std::pair<int64_t, int64_t>, CosSinCache> caches_;
};

struct Case {
  bool cache_op = false;
  DType dtype = DType::kBFloat16;
  bool interleaved = false;
  int64_t head_dim = 128;
  int64_t rotary_dim = 128;
  int64_t tokens = 7;
  int64_t q_heads = 32;
  int64_t k_heads = 8;
  DType pos_dtype = DType::kInt64;
  bool llama31 = false;
  double theta = 10000.0;
  int64_t cache_stride = 0;  // 0: rotary_dim (a dense cache)
  bool c_abi = false;        // call through kiln_apply_rope* instead of kiln::ops
};

std::string Describe(const Case& c, const Layout& l) {
  return std::string(c.cache_op ? "apply_rope_with_cos_sin_cache" : "apply_rope") + " " + kiln::DTypeName(c.dtype) +
         (c.interleaved ? " gptj" : " neox") + " head_dim=" + std::to_string(c.head_dim) +
         " rotary_dim=" + std::to_string(c.rotary_dim) + " tokens=" + std::to_string(c.tokens) +
         " heads=" + std::to_string(c.q_heads) + "/" + std::to_string(c.k_heads) + " positions " +
         kiln::DTypeName(c.pos_dtype) + (c.llama31 ? " llama31" : "") + " theta=" + std::to_string(c.theta) +
         " cache_stride=" + std::to_string(c.cache_stride) + (c.c_abi ? " (C ABI)" : "") + " layout " + l.name;
}

DLTensor DL(void* data, DType dtype, int ndim, int64_t* shape, int64_t* strides) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCUDA, 0};
  t.ndim = ndim;
  switch (dtype) {
    case DType::kFloat16: t.dtype = {kDLFloat, 16, 1}; break;
    case DType::kBFloat16: t.dtype = {kDLBfloat, 16, 1}; break;
    case DType::kFloat32: t.dtype = {kDLFloat, 32, 1}; break;
    case DType::kInt32: t.dtype = {kDLInt, 32, 1}; break;
    default: t.dtype = {kDLInt, 64, 1}; break;
  }
  t.shape = shape;
  t.strides = strides;
  return t;
}

void RunCase(const Case& c, const Layout& l, std::mt19937& rng, CacheStore& caches, CUstream stream = nullptr) {
  INFO(Describe(c, l));
  REQUIRE(l.tokens == c.tokens);  // else the reference and the kernel run past the buffer
  const size_t es = kiln::DTypeSize(c.dtype);
  const HostTensor before = kiln::testing::RandomTensor(c.dtype, static_cast<size_t>(l.size), rng);
  DeviceBuffer buffer(before.bytes.size());
  buffer.Upload(before.bytes);
  const std::vector<int64_t> positions = MakePositions(c.tokens, c.cache_op, rng);
  const std::vector<uint8_t> position_bytes = PositionBytes(positions, c.pos_dtype);
  DeviceBuffer dpos(position_bytes.size());
  dpos.Upload(position_bytes);

  char* q_ptr = buffer.data() + l.q_offset * es;
  char* k_ptr = buffer.data() + l.k_offset * es;
  auto q = TensorView::Strided(q_ptr, c.dtype, {c.tokens, c.q_heads, c.head_dim},
                               {l.q_token_stride, l.q_head_stride, 1});
  auto k = TensorView::Strided(k_ptr, c.dtype, {c.tokens, c.k_heads, c.head_dim},
                               {l.k_token_stride, l.k_head_stride, 1});
  auto pos = TensorView::Contiguous(dpos.data(), c.pos_dtype, {c.tokens});
  int64_t q_shape[3] = {c.tokens, c.q_heads, c.head_dim}, q_strides[3] = {l.q_token_stride, l.q_head_stride, 1};
  int64_t k_shape[3] = {c.tokens, c.k_heads, c.head_dim}, k_strides[3] = {l.k_token_stride, l.k_head_stride, 1};
  int64_t p_shape[1] = {c.tokens};
  DLTensor dq = DL(q_ptr, c.dtype, 3, q_shape, q_strides), dk = DL(k_ptr, c.dtype, 3, k_shape, k_strides);
  DLTensor dp = DL(dpos.data(), c.pos_dtype, 1, p_shape, nullptr);

  std::vector<double> want;
  std::vector<char> rotated;
  kiln::Status status;
  if (!c.cache_op) {
    std::optional<Llama31RopeScaling> scaling;
    if (c.llama31) scaling = Llama31RopeScaling{};  // 8, 1, 4, 8192: Llama-3.1's values
    const kiln::ops::RopeOptions options{c.rotary_dim == c.head_dim ? 0 : c.rotary_dim, c.interleaved, c.theta,
                                         scaling};
    if (c.c_abi) {
      kiln_llama31_rope_scaling cs = {8.0, 1.0, 4.0, 8192};
      const kiln_status s = kiln_apply_rope(&dq, &dk, &dp, options.rotary_dim, c.interleaved ? 1 : 0, c.theta,
                                            c.llama31 ? &cs : nullptr, stream);
      status = s == KILN_OK ? kiln::OkStatus() : kiln::Status(static_cast<kiln::StatusCode>(s), kiln_last_error());
    } else {
      status = kiln::ops::apply_rope(q, k, pos, options, stream);
    }
    const std::vector<double> inv = InvFreqReference(c.rotary_dim, c.theta, scaling);
    ReferenceRope(
        before, l, c.tokens, c.q_heads, c.k_heads, c.rotary_dim, c.interleaved, positions,
        [&](int64_t p, int64_t i, double* cos, double* sin) {
          const double a = static_cast<double>(p) * inv[static_cast<size_t>(i)];
          *cos = std::cos(a);
          *sin = std::sin(a);
          return true;
        },
        &want, &rotated);
  } else {
    const int64_t stride = c.cache_stride > 0 ? c.cache_stride : c.rotary_dim;
    CosSinCache& cache = caches.For(c.rotary_dim, stride);
    auto tcache = TensorView::Strided(cache.device->data(), DType::kFloat32, {kCacheRows, c.rotary_dim}, {stride, 1});
    if (c.c_abi) {
      int64_t c_shape[2] = {kCacheRows, c.rotary_dim}, c_strides[2] = {stride, 1};
      DLTensor dc = DL(cache.device->data(), DType::kFloat32, 2, c_shape, c_strides);
      const kiln_status s = kiln_apply_rope_with_cos_sin_cache(&dq, &dk, &dp, &dc, c.interleaved ? 1 : 0, stream);
      status = s == KILN_OK ? kiln::OkStatus() : kiln::Status(static_cast<kiln::StatusCode>(s), kiln_last_error());
    } else {
      status = kiln::ops::apply_rope_with_cos_sin_cache(q, k, pos, tcache, c.interleaved, stream);
    }
    const int64_t half = c.rotary_dim / 2;
    ReferenceRope(
        before, l, c.tokens, c.q_heads, c.k_heads, c.rotary_dim, c.interleaved, positions,
        [&](int64_t p, int64_t i, double* cos, double* sin) {
          if (p < 0 || p >= kCacheRows) return false;
          *cos = cache.host.Get(static_cast<size_t>(p * stride + i));
          *sin = cache.host.Get(static_cast<size_t>(p * stride + half + i));
          return true;
        },
        &want, &rotated);
  }
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuStreamSynchronize(stream));
  const HostTensor after{c.dtype, buffer.Download()};
  CheckAgainstReference(before, after, want, rotated);
}

TEST_CASE("apply_rope matches a float64 reference over dtypes, styles, dims, tokens, heads and scaling",
          "[gpu][client][ops][rope]") {
  GpuSession session;
  std::mt19937 rng(20260101);
  CacheStore caches;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (bool interleaved : {false, true})
      for (int64_t head_dim : {64, 128, 256})
        for (int64_t rotary_dim : {head_dim, head_dim / 2})
          for (int64_t tokens : {1, 7, 300})
            for (auto [q_heads, k_heads] : {std::pair<int64_t, int64_t>{32, 8}, std::pair<int64_t, int64_t>{4, 4}})
              for (DType pos_dtype : {DType::kInt32, DType::kInt64})
                for (bool llama31 : {false, true}) {
                  Case c{.dtype = dtype,
                         .interleaved = interleaved,
                         .head_dim = head_dim,
                         .rotary_dim = rotary_dim,
                         .tokens = tokens,
                         .q_heads = q_heads,
                         .k_heads = k_heads,
                         .pos_dtype = pos_dtype,
                         .llama31 = llama31,
                         .theta = llama31 ? 500000.0 : 10000.0};
                  RunCase(c, FusedQkv(tokens, q_heads, k_heads, head_dim), rng, caches);
                }
}

TEST_CASE("apply_rope_with_cos_sin_cache matches a float64 reference and skips out-of-range positions",
          "[gpu][client][ops][rope]") {
  GpuSession session;
  std::mt19937 rng(20260102);
  CacheStore caches;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (bool interleaved : {false, true})
      for (int64_t head_dim : {64, 128, 256})
        for (int64_t rotary_dim : {head_dim, head_dim / 2})
          for (int64_t tokens : {1, 7, 300})
            for (auto [q_heads, k_heads] : {std::pair<int64_t, int64_t>{32, 8}, std::pair<int64_t, int64_t>{4, 4}})
              for (DType pos_dtype : {DType::kInt32, DType::kInt64}) {
                Case c{.cache_op = true,
                       .dtype = dtype,
                       .interleaved = interleaved,
                       .head_dim = head_dim,
                       .rotary_dim = rotary_dim,
                       .tokens = tokens,
                       .q_heads = q_heads,
                       .k_heads = k_heads,
                       .pos_dtype = pos_dtype};
                RunCase(c, FusedQkv(tokens, q_heads, k_heads, head_dim), rng, caches);
              }
}

TEST_CASE("the rope ops take heads-major views, padded and odd strides, misaligned pointers and a padded cache",
          "[gpu][client][ops][rope]") {
  GpuSession session;
  std::mt19937 rng(7);
  CacheStore caches;
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (bool cache_op : {false, true}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (bool interleaved : {false, true}) {
        Case c{.cache_op = cache_op, .dtype = dtype, .interleaved = interleaved, .tokens = 300};
        RunCase(c, HeadsMajor(300, 32, 8, 128), rng, caches, stream);
        RunCase(c, FusedQkv(300, 32, 8, 128, /*head_pad=*/8, /*row_pad=*/16), rng, caches, stream);  // still 16-byte
        RunCase(c, FusedQkv(300, 32, 8, 128, /*head_pad=*/1), rng, caches, stream);      // odd head stride: vec 1
        RunCase(c, FusedQkv(300, 32, 8, 128, 0, /*row_pad=*/2), rng, caches, stream);    // token stride: vec 2
        RunCase(c, FusedQkv(300, 32, 8, 128, 0, 0, /*offset=*/1), rng, caches, stream);  // pointers off by one element
        Case odd = c;  // rotary_dim 96 of 128 (48 pairs: 6 threads per token), and 100 (vec 2)
        odd.rotary_dim = 96;
        RunCase(odd, FusedQkv(300, 32, 8, 128), rng, caches, stream);
        odd.rotary_dim = 100;
        odd.tokens = 7;  // the case's token count must match its layout's
        RunCase(odd, FusedQkv(7, 32, 8, 128), rng, caches, stream);
        Case wide = c;  // the largest rotary_dim: 512 of a 512 head
        wide.head_dim = wide.rotary_dim = 512;
        wide.q_heads = wide.k_heads = 2;
        RunCase(wide, FusedQkv(300, 2, 2, 512), rng, caches, stream);
        if (cache_op) {
          Case padded = c;  // cache rows 130 floats apart: vec 2
          padded.cache_stride = 130;
          RunCase(padded, FusedQkv(300, 32, 8, 128), rng, caches, stream);
        }
      }
    }
  }
  // k without heads (q alone), and one token with one head.
  Case q_only{.tokens = 7, .q_heads = 4, .k_heads = 0};
  RunCase(q_only, FusedQkv(7, 4, 0, 128), rng, caches, stream);
  Case tiny{.tokens = 1, .q_heads = 1, .k_heads = 1, .pos_dtype = DType::kInt32};
  RunCase(tiny, FusedQkv(1, 1, 1, 128), rng, caches, stream);
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

TEST_CASE("the rope C ABI matches the reference, and a repeat call reuses the loaded kernel",
          "[gpu][client][capi][rope]") {
  GpuSession session;
  std::mt19937 rng(11);
  CacheStore caches;
  for (bool llama31 : {false, true}) {
    Case c{.dtype = DType::kFloat16,
           .interleaved = true,
           .tokens = 300,
           .llama31 = llama31,
           .theta = 500000.0,
           .c_abi = true};
    RunCase(c, FusedQkv(300, 32, 8, 128), rng, caches);
  }
  Case cached{.cache_op = true, .tokens = 300, .pos_dtype = DType::kInt32, .c_abi = true};
  RunCase(cached, FusedQkv(300, 32, 8, 128), rng, caches);

  // A rotary dim no other test uses: the first call resolves, the next ones are launch-cache
  // hits with no RPC (the kernel serves any token count and heads).
  Case unique{.head_dim = 48, .rotary_dim = 48, .tokens = 7};
  const auto s0 = kiln::GetClientStats();
  RunCase(unique, FusedQkv(7, 32, 8, 48), rng, caches);
  const auto s1 = kiln::GetClientStats();
  CHECK(kiln::testing::KernelFetches(s1) == kiln::testing::KernelFetches(s0) + 1);
  CHECK(s1.op_fast_misses == s0.op_fast_misses + 1);
  unique.tokens = 300;
  unique.q_heads = unique.k_heads = 4;
  RunCase(unique, FusedQkv(300, 4, 4, 48), rng, caches);
  const auto s2 = kiln::GetClientStats();
  CHECK(kiln::testing::KernelFetches(s2) == kiln::testing::KernelFetches(s1));
  CHECK(s2.op_fast_hits == s1.op_fast_hits + 1);
}

TEST_CASE("unsupported rope arguments are refused on a real device, and nothing is written",
          "[gpu][client][ops][rope]") {
  GpuSession session;
  std::mt19937 rng(5);
  const int64_t tokens = 7, q_heads = 4, k_heads = 4, head_dim = 128;
  const Layout l = FusedQkv(tokens, q_heads, k_heads, head_dim);
  const HostTensor before = kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(l.size), rng);
  DeviceBuffer buffer(before.bytes.size());
  buffer.Upload(before.bytes);
  DeviceBuffer dpos(tokens * 8), dcache(64 * head_dim * 4);
  dpos.Upload(PositionBytes({0, 1, 2, 3, 4, 5, 6}, DType::kInt64));
  auto view = [&](DType dtype, int64_t t, int64_t heads, int64_t offset) {
    return TensorView::Strided(buffer.data() + offset * 2, dtype, {t, heads, head_dim},
                               {l.q_token_stride, l.q_head_stride, 1});
  };
  const auto q = view(DType::kBFloat16, tokens, q_heads, l.q_offset);
  const auto k = view(DType::kBFloat16, tokens, k_heads, l.k_offset);
  const auto pos = TensorView::Contiguous(dpos.data(), DType::kInt64, {tokens});
  auto expect = [](const kiln::Status& s, const std::string& fragment) {
    INFO(s.ToString());
    CHECK(s.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(s.message().find(fragment) != std::string::npos);
  };
  expect(kiln::ops::apply_rope(q, k, pos, {.rotary_dim = 63}), "rotary_dim: expected an even value in 2..128");
  expect(kiln::ops::apply_rope(q, k, pos, {.rotary_dim = 256}), "rotary_dim: expected an even value in 2..128");
  // fp32 q and k: the same bytes seen as fp32 (half as many elements per head dim).
  const auto q32 = TensorView::Strided(buffer.data(), DType::kFloat32, {tokens, q_heads, 64},
                                       {l.q_token_stride / 2, 64, 1});
  const auto k32 = TensorView::Strided(buffer.data() + l.k_offset * 2, DType::kFloat32, {tokens, k_heads, 64},
                                       {l.k_token_stride / 2, 64, 1});
  expect(kiln::ops::apply_rope(q32, k32, pos, {}), "q: dtype fp32 is not supported; expected fp16 or bf16");
  expect(kiln::ops::apply_rope(q, view(DType::kBFloat16, tokens - 1, k_heads, l.k_offset), pos, {}),
         "k: expected 7 tokens (q's dim 0), found 6");
  const auto float_pos = TensorView::Contiguous(dpos.data(), DType::kFloat32, {tokens});
  expect(kiln::ops::apply_rope(q, k, float_pos, {}), "positions: dtype fp32 is not supported; expected int32 or int64");
  const auto cache = TensorView::Contiguous(dcache.data(), DType::kFloat32, {64, 127});
  expect(kiln::ops::apply_rope_with_cos_sin_cache(q, k, pos, cache, false), "cos_sin_cache: its dim 1 (rotary_dim)");
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  CHECK(buffer.Download() == before.bytes);
}

// Not a test: times both ops at Llama-3.1-8B shapes (32 q heads, 8 k heads, head_dim 128, bf16,
// positions int64, q and k in a fused qkv buffer as vLLM has them) and a device-to-device copy
// of the same bytes, with host timers around back-to-back launches after a warm-up (the
// driver table has no events). Inputs rotate over enough buffers to miss the 60 MB L2. Run
// with "[.rope_bench]"; results are WARN lines.
TEST_CASE("rope timing at Llama-3.1-8B shapes", "[.rope_bench]") {
  GpuSession session;
  const auto& d = kiln::testing::Driver();
  std::mt19937 rng(1);
  const int64_t q_heads = 32, k_heads = 8, head_dim = 128;
  auto cache_host = kiln::testing::RandomTensor(DType::kFloat32, static_cast<size_t>(131072 * head_dim), rng, -1.f,
                                                1.f);
  DeviceBuffer cache(cache_host.bytes.size());
  cache.Upload(cache_host.bytes);
  for (int64_t tokens : {1, 7, 128, 4096, 16384}) {
    const Layout l = FusedQkv(tokens, q_heads, k_heads, head_dim);
    const size_t bytes = static_cast<size_t>(l.size) * 2;
    const int copies = static_cast<int>(std::clamp<size_t>(200'000'000 / bytes, 1, 8));
    std::vector<std::unique_ptr<DeviceBuffer>> buffers, positions;
    std::uniform_int_distribution<int64_t> uniform(0, 131071);
    for (int i = 0; i < copies; ++i) {
      buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
      buffers.back()->Upload(kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(l.size), rng).bytes);
      std::vector<int64_t> p(static_cast<size_t>(tokens));
      for (auto& v : p) v = uniform(rng);
      positions.push_back(std::make_unique<DeviceBuffer>(static_cast<size_t>(tokens) * 8));
      positions.back()->Upload(PositionBytes(p, DType::kInt64));
    }
    // The bytes the op must move: q and k read and written (the rotated part is the whole head).
    const double moved = 2.0 * static_cast<double>(tokens * (q_heads + k_heads) * head_dim * 2) + tokens * 8.0;
    const int iterations = tokens >= 4096 ? 200 : 2000;
    auto time_us = [&](const std::function<void(int)>& call) {
      for (int i = 0; i < 20; ++i) call(i);
      KILN_CU(d.cuCtxSynchronize());
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) call(i);
      KILN_CU(d.cuCtxSynchronize());
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iterations;
    };
    auto views = [&](int i) {
      char* base = buffers[static_cast<size_t>(i % copies)]->data();
      return std::make_tuple(TensorView::Strided(base + l.q_offset * 2, DType::kBFloat16, {tokens, q_heads, head_dim},
                                                 {l.q_token_stride, l.q_head_stride, 1}),
                             TensorView::Strided(base + l.k_offset * 2, DType::kBFloat16, {tokens, k_heads, head_dim},
                                                 {l.k_token_stride, l.k_head_stride, 1}),
                             TensorView::Contiguous(positions[static_cast<size_t>(i % copies)]->data(), DType::kInt64,
                                                    {tokens}));
    };
    const kiln::ops::RopeOptions llama{0, false, 500000.0, Llama31RopeScaling{}};
    const double rope_us = time_us([&](int i) {
      auto [q, k, p] = views(i);
      const kiln::Status s = kiln::ops::apply_rope(q, k, p, llama);
      if (!s.ok()) FAIL(s.ToString());
    });
    const auto tcache = TensorView::Contiguous(cache.data(), DType::kFloat32, {131072, head_dim});
    const double cache_us = time_us([&](int i) {
      auto [q, k, p] = views(i);
      const kiln::Status s = kiln::ops::apply_rope_with_cos_sin_cache(q, k, p, tcache, false);
      if (!s.ok()) FAIL(s.ToString());
    });
    // A copy of the q and k bytes (read + write, as the op), between two of the buffers.
    const size_t qk_bytes = static_cast<size_t>(moved / 2);
    DeviceBuffer copy_target(qk_bytes);
    const double copy_us = time_us([&](int i) {
      KILN_CU(d.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(copy_target.data()),
                                  reinterpret_cast<CUdeviceptr>(buffers[static_cast<size_t>(i % copies)]->data()),
                                  qk_bytes, nullptr));
    });
    WARN("rope bf16 tokens=" << tokens << " heads 32/8 d128 fused qkv, " << iterations << " calls, mean per call: "
                             << "apply_rope (llama3.1) " << rope_us << " us = " << moved / rope_us / 1e3 << " GB/s; "
                             << "with_cos_sin_cache " << cache_us << " us = " << moved / cache_us / 1e3 << " GB/s; "
                             << "memcpy of the q+k bytes " << copy_us << " us = " << moved / copy_us / 1e3 << " GB/s");
  }
}

}  // namespace
