#!/usr/bin/env bash
# The one call on the GPU machine (issues 37 and 51) (an H100 or H200 with CUDA, nvcc,
# CMake and a Python whose PyTorch has CUDA, but no package registry), from
# the repository root:
#
#   scripts/gpu-test.sh            # needs gpu-deps/ (scripts/gpu-prepare.sh)
#
# 1. probes the machine: versions, and what its sandbox (Firecracker or
#    gVisor) does with cgroups, namespaces, memfd and futexes;
# 2. configures ddprun against that Python's LibTorch and NCCL and the
#    Debian packages in gpu-deps/, and builds only what it runs, with every
#    core (no ccache, no -Werror: the compiler is not CI's);
# 3. runs the checks in order of value, each under its own time limit, so
#    that a later one never costs an earlier one its result.
#
# Every step's log and summary.txt (one line per step: result, seconds) go
# to build-gpu/results, the summary as the steps go; with $OUT set (the
# device tool's folder) the end copies the summary there and packs every
# log into $OUT/gpu-logs.tar.gz. Steps are cut to fit GPU_BUDGET_S, so the
# end comes before the call's limit.
# Without a GPU (a rehearsal on a CPU machine, GPU_PYTHON naming a CPU or
# CUDA PyTorch 2.x) the steps that need one say "skipped: no GPU" and the
# rest run, so no build or path error is left for the GPU's minutes.
#
# Variables: GPU_DEPS (gpu-deps/), GPU_BUILD (build-gpu/), GPU_PYTHON
# (python3), GPU_JOBS (nproc), GPU_BUILD_LIMIT (420 s; a 2-core rehearsal
# needs more), GPU_BUDGET_S (525: the device call's limit less a margin),
# GPU_BENCH=0 skips the GPT table, GPU_BENCH_ROWS replaces its rows'
# flags; GPU_ONLY="step ..." runs only those steps (after the build) and
# GPU_TARGETS="target ..." builds only those (a short second call).
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
deps=${GPU_DEPS:-$repo/gpu-deps}
build=${GPU_BUILD:-$repo/build-gpu}
out=$build/results  # every log; packed into $OUT at the end when set
py=$(command -v "${GPU_PYTHON:-python3}") || { echo "gpu-test: no ${GPU_PYTHON:-python3}" >&2; exit 2; }
jobs=${GPU_JOBS:-$(nproc)}
budget=${GPU_BUDGET_S:-525}  # the whole call's seconds; steps are cut to fit
export CCACHE_DISABLE=1  # timings are a cold build's, as on the GPU machine
export PYTHON_EXEC=$py  # the interpreter ddprun runs .py scripts with (torchrun's variable)
rm -rf "$out"; mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
status=0
t_begin=$(date +%s.%N)

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
record() {  # record NAME RESULT SECONDS [NOTE]
  printf '%-26s %-8s %7ss  %s\n' "$1" "$2" "$3" "${4:-}" | tee -a "$summary"
}
# step NAME LIMIT_S [--expect REGEX] COMMAND...: runs it under `timeout`,
# logs to $out/NAME.log, records ok/FAILED/TIMEOUT and its seconds. With
# --expect, the log must also hold a line matching REGEX.
step() {
  local name=$1 limit=$2 expect=""; shift 2
  if [[ -n ${GPU_ONLY:-} && ! " sandbox configure build $GPU_ONLY " =~ " $name " ]]; then
    record "$name" skipped 0 "not in GPU_ONLY"; return 1
  fi
  if [[ ${1:-} == --expect ]]; then expect=$2; shift 2; fi
  # Never past the call's budget: what is left, less a margin for the summary.
  local left
  left=$(awk -v a="$t_begin" -v b="$(date +%s.%N)" -v budget="$budget" 'BEGIN { printf "%d", budget - (b - a) - 5 }')
  if (( left < 5 )); then
    record "$name" skipped 0 "out of time (GPU_BUDGET_S=$budget)"; status=1; return 1
  fi
  (( limit > left )) && limit=$left
  echo "== $name (limit ${limit}s): $*"
  local t0 rc result note=""
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  result=ok
  if (( rc == 124 || rc == 137 )); then
    result=TIMEOUT; note="past ${limit}s"
  elif (( rc != 0 )); then
    result=FAILED; note="rc=$rc"
  elif [[ -n $expect ]] && ! grep -Eq "$expect" "$out/$name.log"; then
    result=FAILED; note="no line matches /$expect/"
  fi
  record "$name" "$result" "$(elapsed "$t0")" "$note"
  if [[ $result != ok ]]; then
    status=1
    echo "   last lines of $out/$name.log:"; tail -25 "$out/$name.log" | sed 's/^/   | /'
    return 1
  fi
}
skip() { record "$1" skipped 0 "$2"; }
finish() {
  # What ddprun warned about on this machine (a sandbox without cgroups or
  # namespaces must cost a warning, not the job).
  grep -h "\] warning:\|^ddprun: warning" "$out"/*.log 2>/dev/null | sed 's/^\[ddprun [0-9:.]*\] //' \
    | sort | uniq -c | sort -rn | head -15 | sed 's/^/   ddprun said: /' | tee -a "$summary"
  record total "$([[ $status == 0 ]] && echo ok || echo FAILED)" "$(elapsed "$t_begin")"
  # The device tool brings back at most 8 files from $OUT: the summary and
  # one archive of every log.
  if [[ -n ${OUT:-} ]]; then
    cp "$summary" "$out/versions.txt" "$OUT/" 2>/dev/null
    tar czf "$OUT/gpu-logs.tar.gz" -C "$out" .
  fi
  exit $status
}

if [[ ! -d $deps/usr || ! -f $deps/gloo-source.tar.xz ]]; then
  echo "gpu-test: $deps is missing: run scripts/gpu-prepare.sh on a CPU machine with apt first" >&2
  exit 2
fi
lib=$deps/usr/lib/x86_64-linux-gnu
export PATH=$PATH:$deps/usr/bin  # the machine's own cmake, ninja and compiler first
export PKG_CONFIG_PATH=$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$lib:$deps/usr/lib:$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# --- 1. the machine ---------------------------------------------------------
gpu=0
"$py" - >"$out/versions.txt" 2>&1 <<'EOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cxx11abi", int(torch._C._GLIBCXX_USE_CXX11_ABI))
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, "sms", p.multi_processor_count, "memory_gib", round(p.total_memory / 2**30, 1),
          "nccl", ".".join(map(str, torch.cuda.nccl.version())))
else:
    print("gpu none")
EOF
{ uname -srm; nvidia-smi -L 2>&1; nvcc --version 2>&1 | tail -1; cmake --version | head -1; c++ --version | head -1; } \
  >>"$out/versions.txt" 2>&1
cat "$out/versions.txt"
grep -q '^gpu none' "$out/versions.txt" || gpu=1
if [[ $(awk '/cxx11abi/ { for (i = 1; i < NF; i++) if ($i == "cxx11abi") print $(i + 1) }' "$out/versions.txt") != 1 ]]; then
  echo "gpu-test: $py's PyTorch is missing or uses _GLIBCXX_USE_CXX11_ABI=0; Debian's gRPC/spdlog need 1 (PyTorch >= 2.7)" >&2
  exit 2
fi
# What the sandbox allows (informational: ddprun must degrade, not fail).
step sandbox 30 "$py" - <<'EOF'
import ctypes, os, subprocess
def probe(name, fn):
    try:
        print(f"{name}: {fn()}")
    except Exception as e:
        print(f"{name}: unavailable ({type(e).__name__}: {e})")
probe("kernel", lambda: os.uname().release)
probe("cgroup", lambda: open("/proc/self/cgroup").read().strip())
probe("cgroup2 controllers", lambda: open("/sys/fs/cgroup/cgroup.controllers").read().strip())
probe("memfd_create", lambda: os.close(os.memfd_create("ddprun-probe")) or "ok")
probe("/dev/shm", lambda: os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize >> 20 and "ok")
probe("unshare -n", lambda: subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True).returncode)
libc = ctypes.CDLL(None, use_errno=True)
probe("futex wake", lambda: libc.syscall(202, ctypes.byref(ctypes.c_int(0)), 1, 1, None, None, 0))
probe("cpus", lambda: len(os.sched_getaffinity(0)))
EOF

# --- 2. configure and build -------------------------------------------------
# gpu-deps/usr/include is a system folder there, as /usr/include is here:
# headers some targets reach without linking their package (nlohmann's)
# come from it.
# CUDA: the machine's toolkit ($CUDA_HOME, nvcc's on PATH, /usr/local/cuda),
# one with nvcc and the runtime's headers; without one, CMake puts a
# toolkit together from the wheel's nvidia packages (rehearsals).
cuda_root=()
for c in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo .)")")")" /usr/local/cuda; do
  if [[ -n $c && -x $c/bin/nvcc && -f $c/include/cuda_runtime_api.h ]]; then
    cuda_root=(-DDDPRUN_CUDA_ROOT="$c"); break
  fi
done
echo "CUDA toolkit: ${cuda_root[*]:-none, from the wheel packages}" | tee -a "$summary"
step configure 180 --expect "ddprun: LibTorch" \
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$deps/usr" -DDDPRUN_PYTHON="$py" "${cuda_root[@]}" \
  -DCMAKE_CXX_FLAGS="-isystem $deps/usr/include" \
  -DProtobuf_PROTOC_EXECUTABLE="$deps/usr/bin/protoc" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DDDPRUN_FUZZ=OFF -DDDPRUN_WERROR=OFF \
  -DDDPRUN_GLOO_SOURCE="$deps/gloo-source.tar.xz" \
  || { skip everything "configure failed"; finish; }
grep -h "ddprun:" "$out/configure.log" | tee -a "$summary"
nccl=0
grep -q "NCCL found" "$out/configure.log" && nccl=1
targets=(ddprun nccl_runner_tests comm_tests collective_check gpt gpt_tests)
(( nccl )) && targets+=(nccl_check)
if [[ -n ${GPU_TARGETS:-} ]]; then read -ra targets <<<"$GPU_TARGETS"; fi
step build "${GPU_BUILD_LIMIT:-420}" cmake --build "$build" -j "$jobs" --target "${targets[@]}" \
  || { skip everything "build failed"; finish; }
echo "   $(grep -c 'warning:' "$out/build.log") compiler warnings (build.log)" | tee -a "$summary"
bin=$build/bin

# --- 3. the checks, in order of value ---------------------------------------
# Issue 51 first: worker_lib's fused and foreach AdamW and its clip against
# LibTorch's on the GPU, then the GPT table (issues 10 and 51): the C++
# trainer with each AdamW, and with its step captured as a CUDA graph
# (ddp::CapturedStep), against PyTorch eager (foreach, fused, compiled),
# and where each step's time goes. gpt_tests below compares the captured
# step with the plain loop and resumes a captured run from its checkpoint.
# PyTorch 2.11's libtorch.so carries a std::filesystem::remove_all that
# jumps to 0 (worker_lib/CMakeLists.txt): comm_tests run with libstdc++
# preloaded.
preload=$(c++ -print-file-name=libstdc++.so.6)
if (( gpu )); then
  step optim_cuda 60 env DDPRUN_TEST_DEVICE=cuda LD_PRELOAD="$preload" "$bin/comm_tests" --gtest_filter='Optim.*:CapturedStep.*'
  grep -h "^\[  PASSED\|^\[  FAILED" "$out/optim_cuda.log" >>"$summary"
else
  skip optim_cuda "no GPU"
fi
if (( gpu )) && [[ ${GPU_BENCH:-1} != 0 ]]; then
  peak=h100; grep -q H200 "$out/versions.txt" && peak=h200
  step gpt_bench "${GPU_BENCH_LIMIT:-330}" "$py" "$repo/bench/gpt_throughput.py" --build "$build" --python "$py" \
    --model small --device cuda --dtype bf16 --batch-size 16 --steps 30 --repeats 2 --peak "$peak" \
    ${GPU_BENCH_ROWS:---cpp-optimizers plain,fused,fused-graph --eager-variants default,fused,compile} --breakdown
  grep -h "^|\|^device\|^Per step" "$out/gpt_bench.log" >>"$summary"
else
  skip gpt_bench "$( (( gpu )) && echo GPU_BENCH=0 || echo 'no GPU')"
fi
# Where each side's GPU time goes, kernel by kernel: three steps of the C++
# trainer (uncaptured, as the earlier profiles; the table above has the
# captured step's speed) and of eager profiled, the traces compared (then
# deleted: tens of MB).
if (( gpu )); then
  step gpt_profile 150 bash -c '"$1" --model small --device cuda --dtype bf16 --batch-size 16 --steps 8 \
      --log-every 1000000 --capture off --profile "$4/cpp-trace.json" &&
    "$2" "$3/bench/gpt_eager.py" --model small --device cuda --dtype bf16 --batch-size 16 --steps 8 \
      --profile "$4/eager-trace.json" &&
    "$2" "$3/bench/profile_compare.py" "$4/cpp-trace.json" "$4/eager-trace.json" --steps 3 --top 25;
    rc=$?; rm -f "$4"/*-trace.json; exit $rc' _ "$bin/gpt" "$py" "$repo" "$out"
  grep -h "^| per step\|^| time in\|^| launches\|^| distinct" "$out/gpt_profile.log" >>"$summary"
else
  skip gpt_profile "no GPU"
fi
if (( gpu && nccl )); then
  # NCCL through worker_lib at world size 1 under ddprun: the id made by rank
  # 0, all_reduce after kernels on the default and a side stream, the async
  # path, DDP with its automatic finalize, broadcast, all_gather.
  step nccl_check 120 --expect "nccl ok" "$bin/ddprun" --nproc 1 "$bin/nccl_check"
  grep -h "nccl ok" "$out/nccl_check.log" >>"$summary"
  # The GPT example on CUDA: learning, SIGKILL and resume from a checkpoint,
  # a GPU checkpoint resumed on CPU and read by torch.load.
  step gpt_tests 180 env DDPRUN_TEST_DEVICE=cuda DDPRUN_TEST_PYTHON="$py" "$bin/gpt_tests"
  # A heal's NCCL abort and re-init, in one process: abort with a collective
  # in flight, later collectives fail at once, reconnect in generation 1
  # with a fresh id, DDP goes on.
  step nccl_heal 120 --expect "nccl heal ok" "$bin/ddprun" --nproc 1 "$bin/nccl_check" --heal
  grep -h "nccl heal ok" "$out/nccl_heal.log" >>"$summary"
  # An unmodified PyTorch script on NCCL, under ddprun and under torchrun,
  # with and without device_id (what PyTorch warns about is in the logs).
  script=$repo/tests/interop/torch_nccl.py
  step torch_nccl_ddprun 120 --expect "interop ok: backend nccl" "$bin/ddprun" --nproc 1 "$script"
  step torch_nccl_ddprun_device_id 120 --expect "interop ok: backend nccl" "$bin/ddprun" --nproc 1 "$script" --device-id
  step torch_nccl_torchrun 120 --expect "interop ok: backend nccl" "$py" -m torch.distributed.run --standalone --nproc_per_node 1 "$script"
  grep -h "interop ok\|pytorch warned" "$out"/torch_nccl_*.log | sort | uniq -c >>"$summary"
else
  why="no GPU"; (( nccl )) || why="no NCCL found by CMake"
  for s in nccl_check gpt_tests nccl_heal torch_nccl_ddprun torch_nccl_ddprun_device_id torch_nccl_torchrun; do
    skip "$s" "$why"
  done
  # The rehearsal still runs the Python script, on Gloo and CPU.
  step torch_script_cpu 120 --expect "interop ok: backend gloo" "$bin/ddprun" --nproc 1 "$repo/tests/interop/torch_nccl.py"
fi
# CPU paths with this LibTorch and in this sandbox: shared memory and Gloo
# between processes, the NCCL runner's logic over its fake.
step collective_check_gloo 90 "$bin/ddprun" --nproc 2 "$bin/collective_check"
step nccl_runner_tests 60 "$bin/nccl_runner_tests"
step comm_tests 150 env LD_PRELOAD="$preload" "$bin/comm_tests"
finish

