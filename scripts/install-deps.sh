#!/usr/bin/env bash
# Installs the Debian packages ddprun needs, and only those that are missing.
# Safe to run again.
#
#   scripts/install-deps.sh launcher   ddprun alone: gRPC, protobuf, spdlog, CLI11, ...
#                                      (no LibTorch: for PyTorch scripts)
#   scripts/install-deps.sh job        + LibTorch and the dataset: the README's first command
#   scripts/install-deps.sh tests      + what the tests and benchmarks use (Slurm, etcd, clang,
#                                      GoogleTest, PyTorch 1.13, stress-ng, ...): scripts/test.sh
# With no argument: tests (everything).
set -euo pipefail

usage() {
  echo "usage: scripts/install-deps.sh [launcher|job|tests]" >&2
  exit 2
}
[ "$#" -le 1 ] || usage
set_name=${1:-tests}

launcher=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libcli11-dev nlohmann-json3-dev zlib1g-dev procps
  libdw-dev                      # hung workers' stacks: function names and source lines
  libraft-dev                    # the embedded control plane: Raft among the job's first agents
  ccache                         # in every set: installed later, it would change the compiler
                                 # command and rebuild everything an earlier set-up built
)
job=(
  libtorch-dev libgloo-dev libopenblas0-openmp dataset-fashion-mnist
  libisal-dev                    # checkpoint checksums: zlib's crc32, 5x faster (optional to the build)
)
tests=(
  libgtest-dev python3-torch openssl
  clang libclang-rt-14-dev       # the second lane and the rendezvous fuzzer
  slurmctld slurmd slurm-client  # tests/slurm: a real Slurm for `srun ddprun`
  gnuplot-nox                    # bench/ddprun-bench draws its charts
  python3-venv                   # scripts/setup-torch2.sh: PyTorch 2.x from PyPI in a venv
  etcd-server etcd-client        # --rdzv-backend etcd, and the tests of a control plane that survives its host
  stress-ng                      # bench/soak.py (and its short run in ctest): jobs under load
  prometheus                     # the metrics tests: a real Prometheus scrapes /metrics (promtool checks it)
  iproute2                       # `ip netns`: the multi-host tests' hosts (a minimal Debian lacks it)
  debootstrap                    # the wheel's test: a bare Debian 12 root that never built anything
)
case "$set_name" in
  launcher) packages=("${launcher[@]}") ;;
  job) packages=("${launcher[@]}" "${job[@]}") ;;
  tests) packages=("${launcher[@]}" "${job[@]}" "${tests[@]}") ;;
  *) echo "install-deps: unknown set '$set_name' (launcher, job or tests)" >&2; usage ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages of '$set_name' present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
