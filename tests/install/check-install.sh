#!/usr/bin/env bash
# check-install.sh CHECK PREFIX SOURCE_DIR SCRATCH_DIR - checks of an installed kvsim
# (`cmake --install BUILD --prefix PREFIX`), run by ctest (tests/install/CMakeLists.txt):
#
#   install    removes PREFIX, then installs the build $KVSIM_BUILD_DIR into it (the fixture)
#   layout     the include dir holds kvsim/kvsim.h only, the libraries (libkvsim.so with its soname
#              links, libkvsim.a), kvsim.pc, the CMake package and bin/kvsim are there
#   pkgconfig  docs/examples/route.c built with `$CC $(pkg-config --cflags --libs kvsim)`, run
#   static     the same with `pkg-config --static --libs`: libkvsim.a, then every library static
#   cmake      docs/examples configured with find_package(kvsim), built, its programs run
#   exports    the installed libkvsim.so passes .ci/check-exports
#
# The programs are built in SCRATCH_DIR (emptied first) from copies of the examples, so nothing
# of the source tree is on their include path. Environment: CC, the C compiler; CXX, a C++
# compiler (for `cmake`); CMAKE, the cmake executable; KVSIM_EXAMPLE_FLAGS, flags for every
# compile and link (a sanitizer build's -fsanitize=..., which its libkvsim needs).
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: $0 install|layout|pkgconfig|static|cmake|exports PREFIX SOURCE_DIR SCRATCH_DIR" >&2
  exit 2
fi
check=$1 prefix=$2 src=$3 scratch=$4
CC=${CC:-cc} CMAKE=${CMAKE:-cmake}
read -r -a extra <<<"${KVSIM_EXAMPLE_FLAGS:-}"
warn=(-Wall -Wextra -Wpedantic -Werror)
libdir=$prefix/lib

fail() {
  echo "check-install $check: $*" >&2
  exit 1
}
version_part() { sed -n "s/^#define KVSIM_VERSION_$1 \\([0-9][0-9]*\\).*/\\1/p" "$src/runtime/kvsim.h"; }
major=$(version_part MAJOR)
version=$major.$(version_part MINOR).$(version_part PATCH)

# run_route PROGRAM: runs it; it must exit 0 and print 200 request lines and its summary.
run_route() {
  local out=$scratch/$(basename "$1").out
  "$1" >"$out" || fail "$1 exited $? (output in $out)"
  local n
  n=$(grep -c '^request ' "$out" || true)
  [ "$n" = 200 ] || fail "$1 printed $n request lines, not 200 (output in $out)"
  grep -q "^summary: kvsim $version, .* 200 finished" "$out" ||
    fail "$1: no summary line with 200 finished requests (output in $out)"
  tail -n 1 "$out"
}

# needed PROGRAM: its DT_NEEDED libraries, one a line.
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

if [ "$check" != install ]; then
  [ -d "$prefix" ] || fail "$prefix does not exist: the install_prefix fixture did not run"
  rm -rf "$scratch"
  mkdir -p "$scratch"
fi

case $check in
install)
  [ -n "${KVSIM_BUILD_DIR:-}" ] || fail "KVSIM_BUILD_DIR is not set"
  # No stale file of an earlier install may hide a missing install rule.
  rm -rf "$prefix"
  "$CMAKE" --install "$KVSIM_BUILD_DIR" --prefix "$prefix"
  ;;

layout)
  found=$(cd "$prefix/include" && find . -mindepth 1 | sort | tr '\n' ' ')
  [ "$found" = "./kvsim ./kvsim/kvsim.h " ] ||
    fail "$prefix/include must hold kvsim/kvsim.h only, it holds: $found"
  cmp "$src/runtime/kvsim.h" "$prefix/include/kvsim/kvsim.h" ||
    fail "the installed kvsim.h differs from runtime/kvsim.h"
  real=$libdir/libkvsim.so.$version
  [ -f "$real" ] && [ ! -L "$real" ] || fail "$real is missing (or a link)"
  [ "$(readlink "$libdir/libkvsim.so.$major")" = "libkvsim.so.$version" ] ||
    fail "$libdir/libkvsim.so.$major is not a link to libkvsim.so.$version"
  [ "$(readlink "$libdir/libkvsim.so")" = "libkvsim.so.$major" ] ||
    fail "$libdir/libkvsim.so is not a link to libkvsim.so.$major"
  soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ "$soname" = "libkvsim.so.$major" ] || fail "the soname of $real is '$soname'"
  for f in "$libdir/libkvsim.a" "$libdir/pkgconfig/kvsim.pc" \
    "$libdir/cmake/kvsim/kvsimConfig.cmake" "$libdir/cmake/kvsim/kvsimConfigVersion.cmake" \
    "$prefix/bin/kvsim" "$prefix/share/doc/kvsim/api.md"; do
    [ -f "$f" ] || fail "$f is missing"
  done
  # Every command's --help text, as the installed kvsim prints it.
  for cmd in replay validate calibrate conform soak minimize stress pool-demo; do
    "$prefix/bin/kvsim" "$cmd" --help | cmp -s - "$prefix/share/doc/kvsim/kvsim-$cmd.txt" ||
      fail "$prefix/share/doc/kvsim/kvsim-$cmd.txt is missing or is not kvsim $cmd --help"
  done
  "$prefix/bin/kvsim" --version | grep "^kvsim $version " >/dev/null ||
    fail "$prefix/bin/kvsim --version does not say kvsim $version"
  echo "check-install layout: $prefix holds kvsim $version (soname $soname), kvsim.pc, the CMake package"
  ;;

pkgconfig | static)
  export PKG_CONFIG_PATH=$libdir/pkgconfig
  [ "$(pkg-config --modversion kvsim)" = "$version" ] || fail "pkg-config --modversion kvsim"
  [[ " $(pkg-config --cflags kvsim) " == *" -I$prefix/include "* ]] ||
    fail "pkg-config --cflags kvsim is '$(pkg-config --cflags kvsim)'"
  cp "$src/docs/examples/route.c" "$scratch/"
  cd "$scratch"
  read -r -a cflags <<<"$(pkg-config --cflags kvsim)"
  if [ "$check" = pkgconfig ]; then
    read -r -a libs <<<"$(pkg-config --libs kvsim)"
    "$CC" -std=c17 "${warn[@]}" "${extra[@]}" route.c -o route "${cflags[@]}" "${libs[@]}" \
      -Wl,-rpath,"$libdir"
    needed route | grep -x "libkvsim.so.$major" >/dev/null || fail "route does not need libkvsim.so.$major"
    ldd ./route | grep "libkvsim.so.$major => $libdir/" >/dev/null ||
      fail "route does not load $libdir/libkvsim.so.$major"
    run_route ./route
    exit 0
  fi
  read -r -a libs <<<"$(pkg-config --static --libs kvsim)"
  # -lkvsim would take libkvsim.so, which sits beside libkvsim.a: name the archive.
  for i in "${!libs[@]}"; do
    if [ "${libs[i]}" = -lkvsim ]; then libs[i]=-l:libkvsim.a; fi
  done
  "$CC" -std=c17 "${warn[@]}" "${extra[@]}" route.c -o route_static "${cflags[@]}" "${libs[@]}"
  if needed route_static | grep '^libkvsim' >/dev/null; then fail "route_static needs libkvsim.so"; fi
  run_route ./route_static
  # Every library static (-l:libX.a), the C library's aside: what `pkg-config --static` lists
  # must be enough. Debian ships the archive of each dependency (liburcu-dev, libck-dev, ...).
  all=()
  for l in "${libs[@]}"; do
    case $l in
    -l:* | -lpthread | -lm | -ldl | -lrt | -lc) all+=("$l") ;;
    -l*) all+=("-l:lib${l#-l}.a") ;;
    *) all+=("$l") ;;
    esac
  done
  "$CC" -std=c17 "${warn[@]}" "${extra[@]}" route.c -o route_all_static "${cflags[@]}" "${all[@]}"
  others=$(needed route_all_static | grep -Ev '^(libc|libm|libpthread|libdl|librt|libasan|libubsan|libtsan|libgcc_s|libstdc\+\+|ld-linux.*)\.so' || true)
  [ -z "$others" ] || fail "route_all_static still needs: $others"
  run_route ./route_all_static
  ;;

cmake)
  if [ -z "${CXX:-}" ]; then
    fail "no C++ compiler (c++ or g++) was found when kvsim was configured: install build-essential and reconfigure"
  fi
  # The whole project, out of the source tree, so that it only sees what was installed.
  cp "$src/docs/examples/CMakeLists.txt" "$src/docs/examples/route.c" \
    "$src/docs/examples/route.cpp" "$scratch/"
  "$CMAKE" -S "$scratch" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_C_FLAGS="${warn[*]} ${extra[*]}" -DCMAKE_CXX_FLAGS="${warn[*]} ${extra[*]}"
  found=$(sed -n 's/^kvsim_DIR:[A-Z]*=//p' "$scratch/build/CMakeCache.txt")
  [ "$(realpath "$found")" = "$(realpath "$libdir/cmake/kvsim")" ] ||
    fail "find_package(kvsim) found $found, not $libdir/cmake/kvsim"
  "$CMAKE" --build "$scratch/build" -j2
  [ -x "$scratch/build/route_c_static" ] ||
    fail "no route_c_static: the package did not define kvsim::kvsim_static"
  for p in route_c route_cpp route_c_static; do
    run_route "$scratch/build/$p"
  done
  # Same workload, same policy, same engines: the same line for every request.
  for p in route_cpp route_c_static; do
    diff <(grep '^request ' "$scratch/route_c.out") <(grep '^request ' "$scratch/$p.out") ||
      fail "$p's requests differ from route_c's"
  done
  ;;

exports)
  bash "$src/.ci/check-exports" "$libdir/libkvsim.so"
  ;;

*)
  fail "unknown check (install, layout, pkgconfig, static, cmake or exports)"
  ;;
esac
