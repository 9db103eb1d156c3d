# The Debian package of an install: `cpack -G DEB` in the build folder makes
# kiln_VERSION_ARCH.deb (kilnd, kiln, kiln-launch, libkiln_client with its headers, CMake
# package and kiln.pc, the kernel library's device code, the systemd units and the kiln user,
# the docs) and kiln-dbgsym_VERSION_ARCH.ddeb (the debug symbols split off the binaries, under
# /usr/lib/debug/.build-id/). Included last from the top-level CMakeLists.txt, after every
# install rule. docs/building.md says how to build it; packaging/test_deb.sh installs and
# exercises it (a step of .ci/run).

# The README beside the docs (deploy/ installs docs/*.md there, where the units' Documentation=
# points: share/doc/kiln).
install(FILES "${PROJECT_SOURCE_DIR}/README.md" DESTINATION "${CMAKE_INSTALL_DOCDIR}")

# The package installs under /usr whatever prefix the build folder was configured with: every
# installed path is relative to the prefix at install time (kilnd finds share/kiln/kernels
# beside its binary, the CMake package and kiln.pc are relative to their own folders, and
# deploy/ fills the units' ExecStart= in for the prefix the install runs with), so one build
# folder serves `cmake --install` to /usr/local and the .deb alike. Only the library folder is
# the configured one (lib for the default /usr/local prefix: /usr/lib, which ld.so searches).
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "kiln")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "Kiln")
set(CPACK_PACKAGE_CONTACT "Kiln maintainers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "JIT compilation service for CUDA kernels (kilnd) and its client library")
set(CPACK_PACKAGE_DESCRIPTION
    "kilnd compiles CUDA kernel specs with NVRTC, caches the cubins per node and serves them over
gRPC on a unix socket; libkiln_client fetches, verifies, loads and launches them. Requires the
CUDA 13 toolkit from NVIDIA in /usr/local/cuda (libnvrtc.so.13, libnvJitLink.so.13), which is
not a Debian package: kilnd finds it through its run path /usr/local/cuda/lib64, or through
LD_LIBRARY_PATH / ld.so.conf where CUDA lies elsewhere. Launching kernels needs the NVIDIA driver.")
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")
set(CPACK_DEBIAN_PACKAGE_SECTION "devel")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
# Depends: computed by dpkg-shlibdeps from the binaries' NEEDED libraries and Debian's shlibs
# database, so the list follows the code (on Debian 12: libabsl20220623, libc6, libcurl4,
# libfmt9, libgcc-s1, libgrpc++1.51, libgrpc29, libhiredis0.14, libmicrohttpd12, libprotobuf32,
# libspdlog1.10-fmt9, libsqlite3-0, libssl3, libstdc++6, libsystemd0, with minimum versions).
# libnvrtc and libnvJitLink belong to no Debian package (NVIDIA's toolkit in /usr/local/cuda):
# CPack runs dpkg-shlibdeps with --ignore-missing-info and they appear in no field; the
# description and docs/operations.md say the package requires them. No Recommends either: no
# Debian package name provides them. (A build machine whose CUDA came from NVIDIA's apt repository
# would add NVIDIA's package names here, which is right for nodes set up the same way.)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Debug symbols: stripped from the installed binaries (file(1) says "stripped") and shipped in
# kiln-dbgsym_*.ddeb under /usr/lib/debug/.build-id/, which gdb finds by the binaries' build
# ids (objcopy --only-keep-debug, --strip-unneeded, --add-gnu-debuglink).
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE "xz")
# The kiln user the units run as (deploy/kiln.sysusers), ldconfig for libkiln_client, a guarded
# systemctl daemon-reload for the units (packaging/debian/).
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/debian/postinst"
    "${PROJECT_SOURCE_DIR}/packaging/debian/prerm"
    "${PROJECT_SOURCE_DIR}/packaging/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

include(CPack)
