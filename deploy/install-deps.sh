#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and running tensord
# need. Idempotent: installs only what is missing, and needs root (or sudo)
# only when something is missing. Used by the Makefile, .ci/run and the
# Dockerfile, so there is one list of dependencies.
#
#   deploy/install-deps.sh            build + test + run dependencies
#   deploy/install-deps.sh --runtime  only what the tensord binary needs
#
# The CUDA toolkit is not installed here (it is not in Debian's main archive):
# when nvcc is on PATH the build picks it up (TENSORD_CUDA=AUTO).
set -euo pipefail

runtime_pkgs=(
  libgrpc++1.51 libprotobuf32 libspdlog1.10 libopenblas0-pthread
)
build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev libspdlog-dev libfmt-dev libopenblas-dev zlib1g-dev libssl-dev
  libgtest-dev libgmock-dev
  # The cross-language test generates Python stubs from our proto.
  python3 python3-grpcio python3-protobuf python3-numpy
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
