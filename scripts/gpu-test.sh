#!/usr/bin/env bash
# Run on the GPU machine, in one call, from the repository root: configures
# ddprun against Python PyTorch's LibTorch (with CUDA) and the Debian
# packages scripts/gpu-prepare.sh unpacked into gpu-deps/, builds, and runs
# the tests that matter on a GPU. Results (logs, ctest output) go under
# $OUT when set, else build-gpu/results. Exit status: non-zero when a step
# fails; every step's log says which.
#
#   scripts/gpu-test.sh                # needs gpu-deps/ next to the sources
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
deps=${GPU_DEPS:-$repo/gpu-deps}
build=${GPU_BUILD:-$repo/build-gpu}
out=${OUT:-$build/results}
mkdir -p "$out"
status=0
step() {  # step NAME COMMAND...: runs it, logs to $out/NAME.log, records failure
  local name=$1; shift
  echo "== $name: $*"
  if "$@" >"$out/$name.log" 2>&1; then
    echo "   ok"
  else
    echo "   FAILED (rc=$?), last lines of $out/$name.log:"; tail -20 "$out/$name.log"
    status=1
  fi
}

if [[ ! -d $deps/usr ]]; then
  echo "gpu-test: $deps is missing: run scripts/gpu-prepare.sh on a CPU machine with apt first" >&2
  exit 2
fi
lib=$deps/usr/lib/x86_64-linux-gnu
export PATH=$deps/usr/bin:$PATH
export PKG_CONFIG_PATH=$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$lib:$deps/usr/lib:$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || {
  echo "gpu-test: python3 cannot import torch" >&2; exit 2; }
# Debian's C++ libraries use the new std::string ABI; a LibTorch built with
# the old one cannot link with them.
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
if [[ $abi != 1 ]]; then
  echo "gpu-test: this PyTorch uses _GLIBCXX_USE_CXX11_ABI=0; Debian's gRPC/spdlog need 1 (PyTorch >= 2.7 wheels)" >&2
  exit 2
fi
# NCCL: the one PyTorch loads (nvidia-nccl-cu12), so headers match the
# library in the process; else CUDA's.
nccl_root=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), torch.cuda.get_device_name(0))' \
  | tee "$out/versions.txt"
nvidia-smi -L >>"$out/versions.txt" 2>&1 || true
[[ -n $nccl_root ]] && export LD_LIBRARY_PATH=$nccl_root/lib:$LD_LIBRARY_PATH

step configure cmake -S "$repo" -B "$build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$deps/usr;$torch_prefix" \
  -DProtobuf_PROTOC_EXECUTABLE="$deps/usr/bin/protoc" \
  -DDDPRUN_NCCL_ROOT="$nccl_root" -DDDPRUN_FUZZ=OFF -DDDPRUN_WERROR=ON
grep -E "ddprun:" "$out/configure.log" || true
[[ $status == 0 ]] || exit 1

step build cmake --build "$build" -j "$(nproc)" --target ddprun nccl_runner_tests comm_tests unit_tests nccl_check collective_check ddp_check gpt gpt_tests
[[ $status == 0 ]] || exit 1

step nccl_runner_tests "$build/bin/nccl_runner_tests"
step comm_tests "$build/bin/comm_tests"
step unit_tests "$build/bin/unit_tests"
# NCCL end to end: world size 1, the id made by rank 0, through ddprun.
step nccl_check "$build/bin/ddprun" --nproc 1 "$build/bin/nccl_check"
grep -h "nccl ok" "$out/nccl_check.log" || true
# Multi-rank stays on Gloo (NCCL refuses two ranks on one GPU).
step collective_check_gloo "$build/bin/ddprun" --nproc 2 "$build/bin/collective_check"
# The GPT example on the GPU: learning, SIGKILL and resume through NCCL and
# DDP, a GPU checkpoint resumed on CPU and loaded by PyTorch.
step gpt_tests env DDPRUN_TEST_DEVICE=cuda DDPRUN_TEST_PYTHON="$(command -v python3)" "$build/bin/gpt_tests"
# Issue 10's table: C++ against PyTorch eager, same model, batch and precision.
# GPU_BENCH=0 skips it.
if [[ ${GPU_BENCH:-1} != 0 ]]; then
  peak=h100; nvidia-smi -L 2>/dev/null | grep -q H200 && peak=h200
  step gpt_bench python3 "$repo/bench/gpt_throughput.py" --build "$build" --python "$(command -v python3)" \
    --model small --device cuda --dtype bf16 --batch-size 16 --steps 30 --repeats 3 --peak "$peak"
  cat "$out/gpt_bench.log"
fi
exit $status
