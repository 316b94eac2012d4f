#!/usr/bin/env bash
# Installs the Debian packages ddprun needs, and only those that are missing.
# Used by the README's two commands and by CI. Safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libcli11-dev libgtest-dev libgloo-dev nlohmann-json3-dev
  zlib1g-dev libopenblas0-openmp python3-torch dataset-fashion-mnist
  procps openssl clang libclang-rt-14-dev
  libdw-dev                      # hung workers' stacks: function names and source lines
  libisal-dev                    # checkpoint checksums: zlib's crc32, 5x faster (optional to the build)
  slurmctld slurmd slurm-client  # tests/slurm: a real Slurm for `srun ddprun`
  gnuplot-nox                    # bench/ddprun-bench draws its charts
  python3-venv                   # scripts/setup-torch2.sh: PyTorch 2.x from PyPI in a venv
  etcd-server etcd-client        # --rdzv-backend etcd, and the tests of a control plane that survives its host
  libraft-dev                    # the embedded control plane: Raft among the job's first agents
  stress-ng                      # bench/soak.py (and its short run in ctest): jobs under load
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
