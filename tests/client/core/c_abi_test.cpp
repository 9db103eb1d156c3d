// The C ABI: DLTensor checks (NULL, ndim, shape, dtype code/bits/lanes, device type,
// byte_offset), status codes, the thread-local last error, and the version.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <thread>

#include "kiln/client.h"
#include "kiln/kiln.h"

namespace {

constexpr uintptr_t kBase = 0x7f0000000000;

struct Tensor {
  int64_t shape[2] = {7, 4096};
  DLTensor t{};
  explicit Tensor(uintptr_t address, DLDataType dtype = {kDLBfloat, 16, 1}, int ndim = 2) {
    t.data = reinterpret_cast<void*>(address);
    t.device = {kDLCUDA, 0};
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = ndim == 2 ? shape : shape + 1;
    t.strides = nullptr;  // compact
    t.byte_offset = 0;
  }
};

std::string Error() { return kiln_last_error(); }

void RequireInvalid(kiln_status status, const std::string& fragment) {
  INFO(Error());
  REQUIRE(status == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(Error().find(fragment) != std::string::npos);
}

TEST_CASE("kiln_rms_norm refuses NULL tensors and bad ranks", "[client][capi]") {
  Tensor in(kBase), out(kBase + (1 << 24)), w(kBase + (1 << 25), {kDLBfloat, 16, 1}, 1);
  RequireInvalid(kiln_rms_norm(nullptr, &in.t, &w.t, 1e-6, nullptr),
                 "kiln_rms_norm: out: the DLTensor pointer is NULL");
  RequireInvalid(kiln_rms_norm(&out.t, nullptr, &w.t, 1e-6, nullptr), "input: the DLTensor pointer is NULL");
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, nullptr, 1e-6, nullptr), "weight: the DLTensor pointer is NULL");
  in.t.ndim = 0;
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr), "input: expected ndim 1 to 8, found 0");
  in.t.ndim = 2;
  in.t.shape = nullptr;
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr), "input: shape is NULL with ndim 2");
}

TEST_CASE("kiln_rms_norm refuses dtypes it has no kernel for", "[client][capi]") {
  Tensor in(kBase), out(kBase + (1 << 24)), w(kBase + (1 << 25), {kDLBfloat, 16, 1}, 1);
  in.t.dtype = {kDLFloat, 64, 1};
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr),
                 "input: dtype code 2 (kDLFloat) with 64 bits is not supported");
  in.t.dtype = {kDLBfloat, 16, 2};
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr), "input: dtype lanes must be 1, found 2");
  in.t.dtype = {kDLInt, 32, 1};
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr), "input: dtype int32 is not supported");
  in.t.dtype = {kDLFloat, 16, 1};
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr), "out: expected dtype fp16 (input's), found bf16");
}

TEST_CASE("kiln_rms_norm wants kDLCUDA tensors on one device", "[client][capi]") {
  Tensor in(kBase), out(kBase + (1 << 24)), w(kBase + (1 << 25), {kDLBfloat, 16, 1}, 1);
  in.t.device = {kDLCPU, 0};
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr),
                 "input: expected a CUDA device tensor, found one on cpu");
  in.t.device = {kDLCUDAHost, 0};
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr), "found one on cuda_host:0");
  in.t.device = {kDLROCM, 0};
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr),
                 "input: device type 10 is not supported; expected kDLCUDA (2)");
  in.t.device = {kDLCUDA, 1};
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr), "out: on cuda:0, but input is on cuda:1");
}

TEST_CASE("kiln_rms_norm applies byte_offset and checks the resulting alignment", "[client][capi]") {
  Tensor in(kBase), out(kBase + (1 << 24)), w(kBase + (1 << 25), {kDLBfloat, 16, 1}, 1);
  in.t.byte_offset = 1;
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr),
                 "input: data pointer 0x7f0000000001 is not aligned to 2 bytes");
  in.t.byte_offset = 0;
  in.t.data = nullptr;
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr), "input: data is NULL");
}

TEST_CASE("kiln_rms_norm checks strides, shapes and eps like the C++ API", "[client][capi]") {
  Tensor in(kBase), out(kBase + (1 << 24)), w(kBase + (1 << 25), {kDLBfloat, 16, 1}, 1);
  int64_t strides[2] = {8192, 2};
  in.t.strides = strides;
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr),
                 "input: the last dim must be contiguous (stride 1), found stride 2");
  in.t.strides = nullptr;
  int64_t short_weight[1] = {4095};
  w.t.shape = short_weight;
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr),
                 "weight: expected shape [4096] (input's hidden size), found [4095]");
  w.t.shape = w.shape + 1;
  RequireInvalid(kiln_rms_norm(&out.t, &in.t, &w.t, -1.0, nullptr), "eps: expected a finite value > 0");
}

TEST_CASE("kiln_fused_add_rms_norm refuses overlapping input and residual", "[client][capi]") {
  Tensor in(kBase), w(kBase + (1 << 25), {kDLBfloat, 16, 1}, 1);
  RequireInvalid(kiln_fused_add_rms_norm(&in.t, &in.t, &w.t, 1e-6, nullptr),
                 "kiln_fused_add_rms_norm: input and residual overlap in memory");
  RequireInvalid(kiln_fused_add_rms_norm(&in.t, nullptr, &w.t, 1e-6, nullptr),
                 "residual: the DLTensor pointer is NULL");
}

TEST_CASE("an empty DLTensor is OK without a launch, and clears the last error", "[client][capi]") {
  Tensor in(0), out(0), w(kBase + (1 << 25), {kDLBfloat, 16, 1}, 1);
  in.shape[0] = 0;
  out.shape[0] = 0;
  REQUIRE(kiln_rms_norm(&out.t, nullptr, &w.t, 1e-6, nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK_FALSE(Error().empty());
  CHECK(kiln_rms_norm(&out.t, &in.t, &w.t, 1e-6, nullptr) == KILN_OK);
  CHECK(Error().empty());
}

TEST_CASE("the last error is per thread", "[client][capi]") {
  REQUIRE(kiln_rms_norm(nullptr, nullptr, nullptr, 1e-6, nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  const std::string mine = Error();
  std::string theirs = "unset";
  std::thread([&theirs] { theirs = kiln_last_error(); }).join();
  CHECK(theirs.empty());
  CHECK(Error() == mine);
}

TEST_CASE("status names, version and the socket override", "[client][capi]") {
  CHECK(std::string(kiln_status_name(KILN_OK)) == "OK");
  CHECK(std::string(kiln_status_name(KILN_ERROR_UNAVAILABLE)) == "UNAVAILABLE");
  CHECK(std::string(kiln_status_name(KILN_ERROR_NO_DRIVER)) == "NO_DRIVER");
  CHECK(std::string(kiln_status_name(static_cast<kiln_status>(99))) == "UNKNOWN_STATUS");
  CHECK(std::string(kiln_version()) == KILN_VERSION_STRING);
  CHECK(kiln_set_socket("/tmp/kiln-capi-test.sock") == KILN_OK);
  CHECK(kiln_set_socket(nullptr) == KILN_OK);
}

TEST_CASE("kiln_set_mode takes auto or daemon or embedded and refuses another word keeping the mode",
          "[client][capi][mode]") {
  REQUIRE(kiln_set_socket("/tmp/kiln-capi-mode-test.sock") == KILN_OK);
  REQUIRE(kiln_set_mode("daemon") == KILN_OK);
  CHECK(std::string(kiln_describe_mode()).rfind("daemon at unix:/tmp/kiln-capi-mode-test.sock", 0) == 0);
  RequireInvalid(kiln_set_mode("sometimes"), "kiln_set_mode mode=\"sometimes\" is not one of auto, daemon, embedded");
  CHECK(kiln::CurrentOptions().mode == kiln::ClientMode::kDaemon);
  CHECK(kiln_set_mode("auto") == KILN_OK);
  CHECK(kiln::CurrentOptions().mode == kiln::ClientMode::kAuto);
  CHECK(kiln_set_mode(nullptr) == KILN_OK);
  CHECK(kiln::CurrentOptions().mode == kiln::ClientMode::kFromEnvironment);
  CHECK(kiln_set_socket(nullptr) == KILN_OK);
}

}  // namespace
