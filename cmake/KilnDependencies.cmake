# Every dependency comes from a Debian 12 package (see docs/building.md).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)          # CMake's module: Debian ships no protobuf config
find_package(gRPC CONFIG REQUIRED)       # gRPC::grpc++, gRPC::grpc++_reflection, gRPC::grpc_cpp_plugin
find_package(absl CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(CURL REQUIRED)             # libcurl4-openssl-dev: kilnd's artifact repository downloads
find_package(dlpack CONFIG REQUIRED)     # libdlpack-dev: the DLTensor type of the C ABI
find_package(nlohmann_json CONFIG REQUIRED)
# libhiredis-dev: kilnd's shared cluster cache on Redis (--remote-cache). Debian's 0.14 ships
# no CMake config, only a pkg-config file.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
# libmicrohttpd-dev: kilnd's Prometheus endpoint (--metrics-listen), plain HTTP apart from gRPC;
# found the same way (pkg-config).
pkg_check_modules(MICROHTTPD REQUIRED IMPORTED_TARGET libmicrohttpd)

# CUDA: headers, NVRTC and nvJitLink only. We import the libraries ourselves instead of using
# CUDA::nvrtc, which drags in the libcuda stub; the driver (libcuda.so.1) is dlopen'ed at first
# use so that every binary starts on a machine without a GPU or driver.
set(KILN_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root")
find_path(KILN_CUDA_INCLUDE_DIR cuda.h nvrtc.h HINTS "${KILN_CUDA_ROOT}/include" REQUIRED)
find_library(KILN_NVRTC_LIBRARY nvrtc HINTS "${KILN_CUDA_ROOT}/lib64" REQUIRED NO_DEFAULT_PATH)
find_library(KILN_NVJITLINK_LIBRARY nvJitLink HINTS "${KILN_CUDA_ROOT}/lib64" REQUIRED NO_DEFAULT_PATH)

add_library(kiln::cuda_headers INTERFACE IMPORTED)
set_target_properties(kiln::cuda_headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${KILN_CUDA_INCLUDE_DIR}")
add_library(kiln::nvrtc SHARED IMPORTED)
set_target_properties(kiln::nvrtc PROPERTIES IMPORTED_LOCATION "${KILN_NVRTC_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${KILN_CUDA_INCLUDE_DIR}")
add_library(kiln::nvjitlink SHARED IMPORTED)
set_target_properties(kiln::nvjitlink PROPERTIES IMPORTED_LOCATION "${KILN_NVJITLINK_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${KILN_CUDA_INCLUDE_DIR}")
