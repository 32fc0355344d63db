#!/usr/bin/env bash
# bundle.sh: a relocatable tarball of tensord for any x86-64/arm64 Linux
# machine that has only the NVIDIA driver.
#
#   deploy/bundle.sh [--build-dir DIR] [--out DIR] [--version V]
#                    [--only NAME,NAME...] [--fast] [--keep-tree] [--lean]
#
# Without --build-dir it configures and builds a Release build with CUDA in
# build-bundle/ (CUDA_ARCHS=90 for H100/H200 only; default all cloud GPUs).
# It writes OUT/tensord-bundle-<version>-<arch>.tar.gz holding
#   bin/  tensord, tensorctl, every test binary, the benchmarks, the examples
#         (debug info stripped; RUNPATH $ORIGIN/../lib)
#   lib/  every shared library they need that is not part of the base system
#         or the driver (resolved with ldd: gRPC, protobuf, abseil, OpenBLAS,
#         CUDA runtime, cuBLAS/cuBLASLt, libstdc++, libgcc_s, ...; RUNPATH
#         $ORIGIN) -- never libc/libm/libpthread/libdl/librt/ld-linux or the
#         driver's libcuda/libnvidia-*
#   run-gpu-validation.sh   runs the whole test suite and the GPU benchmark
#   BUILD-INFO              version, commit, build flags, date
# --only limits bin/ to the named binaries (tests/bundle uses it to stay
# quick); --fast compresses with gzip -1; --keep-tree leaves the unpacked
# tree next to the tarball. --lean leaves CUDA's own libraries out (cudart,
# cuBLAS, cuBLASLt -- cuBLASLt alone is over 500 MB) for a machine that has
# the CUDA toolkit installed: binaries then find them through RUNPATH in the
# standard locations (/usr/local/cuda/lib64, /usr/local/cuda/lib,
# /usr/local/cuda/targets/<arch>-linux/lib) or the dynamic loader's cache;
# CUDA_ARCHS=90 deploy/bundle.sh --lean is a 32 MiB .tar.xz (symbols
# stripped too).
# cuDNN (conv2d and pooling on GPUs): either bundle carries only its 130 KB
# front library, libcudnn.so.9, which loads its engines (libcudnn_cnn,
# _ops, _graph, _engines_*, ~500 MB) when the daemon starts -- from the
# machine, through the front library's RUNPATH (the CUDA locations above)
# or LD_LIBRARY_PATH (a PyTorch wheel's nvidia/cudnn/lib). A machine
# without them runs conv2d and pooling composed and says so in the log. Needs patchelf (Debian: apt-get install patchelf). Prints the tarball's path on its last line.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=""
out_dir="$PWD"
version=""
only=""
gzip_level=6
keep_tree=0
lean=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --out) out_dir=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --fast) gzip_level=1; shift ;;
    --keep-tree) keep_tree=1; shift ;;
    --lean) lean=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "bundle.sh: $*" >&2; exit 1; }
command -v patchelf >/dev/null || die "patchelf not found (apt-get install patchelf)"
command -v ldd >/dev/null || die "ldd not found"

if [[ -z "$build_dir" ]]; then
  build_dir="$repo/build-bundle"
  cmake_flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTENSORD_CUDA="${TENSORD_CUDA:-ON}")
  [[ -n "${CUDA_ARCHS:-}" ]] && cmake_flags+=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
  cmake -S "$repo" -B "$build_dir" "${cmake_flags[@]}"
  cmake --build "$build_dir" -j "${JOBS:-$(nproc)}"
fi
build_dir=$(cd "$build_dir" && pwd)
[[ -f "$build_dir/CMakeCache.txt" ]] || die "$build_dir is not a CMake build directory"
[[ -x "$build_dir/server/tensord" ]] || die "$build_dir/server/tensord is missing: build first"

cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt" | head -1; }
if [[ -z "$version" ]]; then
  version=$(cache_value CMAKE_PROJECT_VERSION)
  [[ -n "$version" ]] || version=0.0.0
fi
arch=$(uname -m)
name="tensord-bundle-$version-$arch"
[[ $lean -eq 1 ]] && name="$name-lean"
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
stage="$out_dir/$name"
rm -rf "$stage" "$out_dir/$name.tar.gz" "$out_dir/$name.tar.xz"
mkdir -p "$stage/bin" "$stage/lib"

# --- Binaries ------------------------------------------------------------
is_elf() { [[ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" == '177ELF' ]]; }
declare -A wanted=()
if [[ -n "$only" ]]; then
  IFS=, read -r -a names <<<"$only"
  for n in "${names[@]}"; do wanted[$n]=1; done
fi
binaries=()
while IFS= read -r -d '' f; do
  is_elf "$f" || continue
  base=$(basename "$f")
  [[ -n "$only" && -z "${wanted[$base]:-}" ]] && continue
  if [[ -e "$stage/bin/$base" ]]; then
    die "two binaries are named $base ($f)"
  fi
  cp "$f" "$stage/bin/$base"
  binaries+=("$stage/bin/$base")
done < <(find "$build_dir/server" "$build_dir/client" "$build_dir/tests" \
              "$build_dir/bench" "$build_dir/examples" \
              -path '*/CMakeFiles' -prune -o -type f -perm -u+x -print0 2>/dev/null | sort -z)
[[ ${#binaries[@]} -gt 0 ]] || die "no binaries found under $build_dir"
if [[ -n "$only" ]]; then
  for n in "${!wanted[@]}"; do
    [[ -e "$stage/bin/$n" ]] || die "--only: no binary named $n in $build_dir"
  done
fi

# --- Libraries -------------------------------------------------------------
# Part of every Linux (glibc) or of the NVIDIA driver: never bundled.
system_lib() {
  case "$1" in
    linux-vdso.so*|linux-gate.so*|ld-linux*|ld64.so*|libc.so*|libm.so*| \
    libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*| \
    libcuda.so*|libnvidia-*|libnvcuvid.so*) return 0 ;;
  esac
  return 1
}
# CUDA's own libraries: in the bundle unless --lean.
cuda_lib() {
  case "$1" in
    libcudart.so*|libcublas.so*|libcublasLt.so*|libcurand.so*|libnvrtc*| \
    libnvJitLink.so*) return 0 ;;
  esac
  return 1
}
cuda_targets="$arch-linux"
[[ "$arch" == aarch64 ]] && cuda_targets=sbsa-linux
cuda_runpath="/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/$cuda_targets/lib"
declare -A copied=()
missing=()
for bin in "${binaries[@]}"; do
  # "libfoo.so.1 => /path/libfoo.so.1 (0x...)" or "libfoo.so.1 => not found"
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    system_lib "$soname" && continue
    [[ $lean -eq 1 ]] && cuda_lib "$soname" && continue
    if [[ "$path" == "not" ]]; then
      missing+=("$soname (needed by $(basename "$bin"))")
      continue
    fi
    [[ -n "${copied[$soname]:-}" ]] && continue
    cp -L "$path" "$stage/lib/$soname"
    chmod u+w "$stage/lib/$soname"
    copied[$soname]=1
  done < <(ldd "$bin")
done
[[ ${#missing[@]} -eq 0 ]] || die "unresolved libraries: ${missing[*]}"

# --- Strip and point at lib/ -----------------------------------------------
# A lean bundle keeps no symbol tables either (a third of the binaries).
strip_mode=--strip-debug
[[ $lean -eq 1 ]] && strip_mode=--strip-all
for bin in "${binaries[@]}"; do
  strip "$strip_mode" "$bin" 2>/dev/null || true
  if [[ $lean -eq 1 ]]; then
    patchelf --set-rpath "\$ORIGIN/../lib:$cuda_runpath" "$bin"
  else
    patchelf --set-rpath '$ORIGIN/../lib' "$bin"
  fi
done
for lib in "$stage"/lib/*; do
  [[ -e "$lib" ]] || continue
  # NVIDIA's libraries come stripped; ours (and Debian's) may not.
  case "$(basename "$lib")" in
    libcublas*|libcudart*|libcurand*|libcudnn*) ;;
    *) strip --strip-debug "$lib" 2>/dev/null || true ;;
  esac
  if [[ $lean -eq 1 || "$(basename "$lib")" == libcudnn.so* ]]; then
    # cuDNN's front library looks for its engines on the machine.
    patchelf --set-rpath "\$ORIGIN:$cuda_runpath" "$lib"
  else
    patchelf --set-rpath '$ORIGIN' "$lib"
  fi
done

# --- Validation script and build info ---------------------------------------
install -m 0755 "$repo/deploy/run-gpu-validation.sh" "$stage/run-gpu-validation.sh"
commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$repo" status --porcelain 2>/dev/null | head -1)
{
  echo "version: $version"
  echo "commit: $commit${dirty:+ (with uncommitted changes)}"
  echo "arch: $arch"
  echo "build_type: $(cache_value CMAKE_BUILD_TYPE)"
  echo "cuda: $(cache_value TENSORD_CUDA)"
  echo "cuda_architectures: $(cache_value CMAKE_CUDA_ARCHITECTURES)"
  echo "cuda_libraries: $([[ $lean -eq 1 ]] && echo "the machine's ($cuda_runpath)" || echo bundled)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -sr)"
  echo "binaries: ${#binaries[@]}; libraries: ${#copied[@]}"
} >"$stage/BUILD-INFO"

if [[ $lean -eq 1 ]]; then
  # xz: 32 MiB where gzip gives 70 (OpenBLAS alone is 37 MB unpacked).
  tarball="$out_dir/$name.tar.xz"
  tar -C "$out_dir" -cf - "$name" | xz -T0 -6 >"$tarball"
else
  tarball="$out_dir/$name.tar.gz"
  tar -C "$out_dir" -cf - "$name" | gzip -"$gzip_level" >"$tarball"
fi
[[ $keep_tree -eq 1 ]] || rm -rf "$stage"
echo "bundle.sh: ${#binaries[@]} binaries, ${#copied[@]} libraries" >&2
echo "$tarball"
