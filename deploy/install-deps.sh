#!/usr/bin/env bash
# Installs every package that building, testing and running tensord need, on
# Debian 12 (developers' machines, CI) or Ubuntu 24.04 (the Dockerfile's CUDA
# images). Idempotent: installs only what is missing, and needs root (or
# sudo) only when something is missing. Used by the Makefile, .ci/run and the
# Dockerfile, so there is one list of dependencies.
#
#   deploy/install-deps.sh            build + test + run dependencies
#   deploy/install-deps.sh --runtime  only what the tensord binary needs
#
# The CUDA toolkit is not installed here (it is not in Debian's main archive):
# when nvcc is on PATH the build picks it up (TENSORD_CUDA=AUTO). Nor is
# cuDNN 9 (conv2d and pooling on GPUs; not part of the toolkit): the build
# finds cudnn.h and libcudnn in the toolkit's directories or under
# CUDNN_ROOT. A fresh machine gets it from NVIDIA's wheel,
#   pip install nvidia-cudnn-cu13   (then CUDNN_ROOT=<site-packages>/nvidia/cudnn)
# or NVIDIA's apt repository (cudnn9-cuda-13), or the cuDNN variants of the
# CUDA images (deploy/docker/Dockerfile). Without it the build says so and
# the CUDA device runs conv2d and pooling composed.
set -euo pipefail

# Shared-library packages are named after their soname, and Ubuntu 24.04
# renamed many for the 64-bit time_t transition (t64), so these differ by
# release; every -dev and tool package name below is the same on both.
. /etc/os-release
case "${ID}:${VERSION_ID:-}" in
  ubuntu:24.04)
    runtime_pkgs=(
      libgrpc++1.51t64 libprotobuf32t64 libspdlog1.12-fmt9 libopenblas0-pthread
      libcpp-httplib0.14t64 libtomlplusplus3t64 libsystemd0 libisal2
    ) ;;
  *)
    if [[ "${ID}:${VERSION_ID:-}" != debian:12 ]]; then
      echo "install-deps: ${PRETTY_NAME:-this OS} is neither Debian 12 nor Ubuntu 24.04;" \
           "trying Debian 12's package names" >&2
    fi
    runtime_pkgs=(
      libgrpc++1.51 libprotobuf32 libspdlog1.10 libopenblas0-pthread
      libcpp-httplib0.11 libtomlplusplus3 libsystemd0 libisal2
      # oneDNN 2.x: the CPU device's convolutions and pooling (Ubuntu 24.04 ships 3.x,
      # whose API the build does not use: conv2d stays im2col there).
      libdnnl2
      # Gloo: collectives over host devices (core/collectives).
      libgloo0
    ) ;;
esac
build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev libspdlog-dev libfmt-dev libopenblas-dev zlib1g-dev libssl-dev
  libgtest-dev libgmock-dev
  # /metrics, the config file, sd_notify, fetched chunks' CRC-32 (ISA-L).
  libcpp-httplib-dev libtomlplusplus-dev libsystemd-dev libisal-dev
  # oneDNN: the CPU device's conv2d and pooling (core/cpu/library_kernels.h; optional to
  # the build, which says whether it found a 2.x). Its CMake package asks for
  # OpenCL (Debian builds it with the OpenCL GPU runtime): the ICD loader's
  # headers, which libdnnl-dev only recommends.
  libdnnl-dev ocl-icd-opencl-dev
  # Gloo: collectives over host devices (core/collectives/gloo_communicator.cc;
  # optional to the build, which says whether it found it).
  libgloo-dev
  # The cross-language test generates Python stubs from our proto.
  python3 python3-grpcio python3-protobuf python3-numpy
  # The window ops (conv2d, pooling) are checked against PyTorch through the
  # proto (tests/python): a test-only package, never in the runtime ones
  # or the image.
  python3-torch
  # The Python client (client/python) installs into a venv (Debian 12
  # refuses pip into the system Python); its tests run under pytest, and
  # it builds offline with the system's setuptools and wheel.
  python3-venv python3-pytest python3-setuptools python3-wheel
  # tests/cluster makes network namespaces and veth pairs (ip netns).
  iproute2
  # tests/python/deploy parses the Kubernetes and Compose YAML.
  python3-yaml
  # deploy/bundle.sh sets the bundle's RUNPATH (tests/bundle); --lean
  # bundles are .tar.xz.
  patchelf xz-utils
  # `make fuzz`: clang with libFuzzer and the sanitizer runtimes (the
  # unversioned names follow each release's default LLVM: 14 on Debian 12);
  # llvm gives llvm-symbolizer for readable sanitizer stacks.
  clang libclang-rt-dev llvm
)

pkgs=("${runtime_pkgs[@]}")
if [[ "${1:-}" != "--runtime" ]]; then
  pkgs+=("${build_pkgs[@]}")
fi

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then
    sudo_cmd=(sudo)
  else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
