#!/bin/sh
# The installed kiln.pc as a Makefile user meets it: only the prefix's pkgconfig folder on the
# search path, the version checked, a C program compiled and linked with the flags
# `pkg-config --cflags --libs kiln` prints (with a run path to its libdir, as a user of a
# non-system prefix adds), then run. The prefix is not the configured CMAKE_INSTALL_PREFIX, so
# this also checks that kiln.pc finds its prefix from its own folder.
#   [PKG_CONFIG=pkg-config] pkg_config_consumer.sh PREFIX CC EXPECTED_VERSION SOURCE_DIR OUT
set -eu
pkg_config="${PKG_CONFIG:-pkg-config}"
prefix="$1" cc="$2" expected="$3" src="$4" out="$5"
pc=$(ls "$prefix"/lib*/pkgconfig/kiln.pc "$prefix"/lib/*/pkgconfig/kiln.pc 2>/dev/null | head -n 1)
[ -n "$pc" ] || { echo "pkg-config consumer: no kiln.pc under $prefix/lib*/pkgconfig" >&2; exit 1; }
PKG_CONFIG_LIBDIR=$(dirname "$pc")
export PKG_CONFIG_LIBDIR
unset PKG_CONFIG_PATH
version=$("$pkg_config" --modversion kiln)
[ "$version" = "$expected" ] || { echo "pkg-config consumer: kiln.pc says $version, expected $expected" >&2; exit 1; }
libdir=$("$pkg_config" --variable=libdir kiln)
[ -e "$libdir/libkiln_client.so" ] || { echo "pkg-config consumer: libdir $libdir (from $pc) has no libkiln_client.so" >&2; exit 1; }
flags=$("$pkg_config" --cflags --libs kiln)
echo "pkg-config --cflags --libs kiln: $flags"
# shellcheck disable=SC2086  # the flags are words to split
"$cc" -Wall -Wextra -Werror -o "$out" "$src/pkg_config_main.c" "$src/c_abi.c" $flags "-Wl,-rpath,$libdir"
"$out"
