#!/usr/bin/env bash
# check_bundle.sh SOURCE_DIR BUILD_DIR SCRATCH_DIR: runs deploy/bundle.sh on
# BUILD_DIR and checks the unpacked bundle's binaries start without
# LD_LIBRARY_PATH and load every library from the bundle's lib/.
set -euo pipefail
src=$1 build=$2 scratch=$3
if ! command -v patchelf >/dev/null; then
  echo "SKIP: patchelf not installed (deploy/install-deps.sh installs it)"
  exit 77
fi
rm -rf "$scratch"
mkdir -p "$scratch"
trap 'rm -rf "$scratch"' EXIT
tarball=$(bash "$src/deploy/bundle.sh" --build-dir "$build" --out "$scratch" \
              --version check --fast \
              --only tensord,tensorctl,core_dtype_shape_test,stress_fault_test,fault_client \
            | tail -1)
echo "bundle: $tarball ($(du -h "$tarball" | cut -f1))"
[[ "$(basename "$tarball")" == "tensord-bundle-check-$(uname -m).tar.gz" ]]
mkdir "$scratch/unpacked"
tar -C "$scratch/unpacked" -xzf "$tarball"
root="$scratch/unpacked/tensord-bundle-check-$(uname -m)"
for f in bin/tensord bin/tensorctl bin/core_dtype_shape_test \
         run-gpu-validation.sh BUILD-INFO; do
  [[ -e "$root/$f" ]] || { echo "FAIL: $f missing from the bundle"; exit 1; }
done
bash -n "$root/run-gpu-validation.sh"
unset LD_LIBRARY_PATH

for b in "$root"/bin/*; do
  runpath=$(patchelf --print-rpath "$b")
  [[ "$runpath" == '$ORIGIN/../lib' ]] || { echo "FAIL: $b RUNPATH '$runpath'"; exit 1; }
  # Every library resolves, and every bundled one from lib/.
  if ldd "$b" | grep -q "not found"; then
    echo "FAIL: $b has unresolved libraries:"; ldd "$b"; exit 1
  fi
  for lib in "$root"/lib/*; do
    soname=$(basename "$lib")
    where=$(ldd "$b" | awk -v s="$soname" '$1 == s {print $3}')
    [[ -n "$where" ]] && where=$(readlink -f "$where")
    if [[ -n "$where" && "$where" != "$(readlink -f "$root/lib/$soname")" ]]; then
      echo "FAIL: $b loads $soname from $where, not the bundle"; exit 1
    fi
  done
done
# Never the C library, the loader or the driver.
for forbidden in 'libc.so*' 'ld-linux*' 'libm.so*' 'libpthread.so*' 'libcuda.so*'; do
  if compgen -G "$root/lib/$forbidden" >/dev/null; then
    echo "FAIL: the bundle ships $forbidden"; exit 1
  fi
done
[[ -e "$root/lib/$(ldd "$root/bin/tensord" | awk '$1 ~ /^libstdc\+\+/ {print $1}')" ]] ||
  { echo "FAIL: libstdc++ is not bundled"; exit 1; }

help=$("$root/bin/tensord" --help 2>&1 || true)
grep -q "Usage: tensord" <<<"$help" || { echo "FAIL: tensord --help: $help"; exit 1; }
"$root/bin/core_dtype_shape_test" --gtest_brief=1 >"$scratch/test.log" 2>&1 ||
  { cat "$scratch/test.log"; echo "FAIL: core_dtype_shape_test"; exit 1; }
tail -1 "$scratch/test.log"
# A test that spawns a helper binary finds it in the bundle's bin/, not in
# the build tree it was built in (the first GPU run failed on this).
"$root/bin/stress_fault_test" --gtest_brief=1 \
    --gtest_filter=FaultTest.KilledClientsAreReclaimed >"$scratch/fault.log" 2>&1 ||
  { cat "$scratch/fault.log"; echo "FAIL: stress_fault_test from the bundle"; exit 1; }
echo "PASS: bundle binaries start with LD_LIBRARY_PATH unset"
# cuDNN: the front library only, looking for its engines on the machine.
if ldd "$root/bin/tensord" | grep -q "libcudnn.so"; then
  [[ -e "$root/lib/libcudnn.so.9" ]] || { echo "FAIL: libcudnn.so.9 not bundled"; exit 1; }
  if compgen -G "$root/lib/libcudnn_*" >/dev/null; then
    echo "FAIL: the bundle ships cuDNN's engines"; exit 1
  fi
  [[ "$(patchelf --print-rpath "$root/lib/libcudnn.so.9")" == '$ORIGIN:/usr/local/cuda/lib64:'* ]] ||
    { echo "FAIL: cuDNN RUNPATH $(patchelf --print-rpath "$root/lib/libcudnn.so.9")"; exit 1; }
  echo "PASS: cuDNN's front library bundled, its engines left to the machine"
fi

# --lean: CUDA's own libraries left to the machine, found through RUNPATH.
# (The scratch directory lies inside the build tree that bundle.sh searches
# for binaries: the first bundle's tree goes first.)
rm -rf "$scratch/unpacked" "$tarball"
lean=$(bash "$src/deploy/bundle.sh" --build-dir "$build" --out "$scratch/lean" \
           --version check --lean --only tensord | tail -1)
[[ "$(basename "$lean")" == "tensord-bundle-check-$(uname -m)-lean.tar.xz" ]] ||
  { echo "FAIL: lean bundle named $lean"; exit 1; }
mkdir "$scratch/lean/unpacked"
tar -C "$scratch/lean/unpacked" -xJf "$lean"
lroot="$scratch/lean/unpacked/tensord-bundle-check-$(uname -m)-lean"
if compgen -G "$lroot/lib/libcudart.so*" >/dev/null ||
   compgen -G "$lroot/lib/libcublas*" >/dev/null; then
  echo "FAIL: the lean bundle ships CUDA's libraries"; exit 1
fi
[[ "$(patchelf --print-rpath "$lroot/bin/tensord")" == '$ORIGIN/../lib:/usr/local/cuda/lib64:'* ]] ||
  { echo "FAIL: lean RUNPATH $(patchelf --print-rpath "$lroot/bin/tensord")"; exit 1; }
grep -q "^cuda_libraries: the machine's" "$lroot/BUILD-INFO" ||
  { echo "FAIL: lean BUILD-INFO"; cat "$lroot/BUILD-INFO"; exit 1; }
echo "PASS: lean bundle ($(du -h "$lean" | cut -f1)) leaves CUDA's libraries to the machine"
