// The C++ API from a user's project: the umbrella header, a TensorView, an op's validation.
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstring>

extern "C" int check_c_abi(void);
extern "C" int call_every_c_function(void);

int main() {
  if (std::strcmp(kiln::Version(), KILN_VERSION_STRING) != 0) {
    std::fprintf(stderr, "library %s, headers %s\n", kiln::Version(), KILN_VERSION_STRING);
    return 1;
  }
  // A dtype the op has no kernel for is refused before any GPU or daemon is needed.
  alignas(16) static int storage[64];
  auto x = kiln::TensorView::Contiguous(storage, kiln::DType::kInt32, {4, 16});
  auto w = kiln::TensorView::Contiguous(storage, kiln::DType::kInt32, {16});
  kiln::Status status = kiln::ops::rms_norm(x, x, w, 1e-6);
  if (status.code() != kiln::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "unexpected: %s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("C++: %s\n", status.ToString().c_str());
  if (check_c_abi() != 0) return 1;
  if (call_every_c_function() != 0) return 1;
  std::printf("kiln consumer ok (kiln %s, daemon target %s)\n", kiln::Version(), kiln::DaemonTarget().c_str());
  return 0;
}
