#!/usr/bin/env python3
"""The wheel on a machine that never built anything (issue 61).

Builds the wheel (scripts/build-wheel.sh), then, in a bare Debian 12 root
(debootstrap's minbase with python3 and python3-venv alone: no compiler, no
-dev package, no gRPC, protobuf, spdlog, libraft or Gloo), as a user
without root, in a fresh venv:

  1. `pip install` the wheel (no index: it needs nothing else);
  2. `ddprun --version` and `pip show ddprun` name python/ddprun's version;
  3. `ddprun --nproc 2 ddp_hello.py` prints what torchrun prints;
  4. `plain_loop_healed.py` with rank 1 SIGKILLed at step 10 (in its
     learning rate's warm-up) heals and ends with the checksum of an
     uninterrupted run; both runs by ddprun's path with the venv off PATH
     (the scripts still get the venv's Python).

The user's PyTorch is PyPI's 2.x from lane 2's venv (TORCH2_VENV), mounted
read-only into the root and put on the fresh venv's path by a .pth file:
the same wheels a `pip install torch` would bring, without downloading
a few GB each run. The root runs in a private mount namespace per command
(`unshare --mount`), so nothing stays mounted when a command ends.

Needs root (debootstrap, chroot, mount) and debootstrap: without root it
says so and skips (77). The bare root is kept in WORK/base for the next
run (debootstrap takes about 40 s); each run works on a copy of it.

Usage: wheel_bare_root_test.py SOURCE_DIR TORCH2_VENV WORK
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from recovery import working_children  # noqa: E402  (ddprun's workers, not its waiting standbys)

USER = "trainer"
HOME = "/home/" + USER
# What a build of ddprun needs and a user's machine need not have.
FORBIDDEN = re.compile(r"-dev$|grpc|protobuf|spdlog|raft|gloo|torch|absl|libfmt|cmake|^g\+\+|^gcc(-\d+)?$|^cpp|clang")


def fail(msg):
    print("FAILED: " + msg, flush=True)
    sys.exit(1)


def say(msg):
    print("wheel test: " + msg, flush=True)


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


class BareRoot:
    """A copy of the bare root, entered through a private mount namespace:
    /proc, the host's /dev (the device nodes), a fresh /dev/shm and the
    PyTorch venv read-only at /opt/torch2."""

    def __init__(self, path, torch2_venv):
        self.path, self.torch2_venv = path, torch2_venv

    def argv(self, cmd, user=True):
        r = self.path
        mounts = (f'mount -t proc proc "{r}/proc" && mount --bind /dev "{r}/dev" && '
                  f'mount -t tmpfs -o size=1g,mode=1777 tmpfs "{r}/dev/shm" && '
                  f'mount --bind "{self.torch2_venv}" "{r}/opt/torch2" && '
                  f'mount -o remount,bind,ro "{r}/opt/torch2"')
        who = [f"--userspec={USER}:{USER}"] if user else []
        env = ["env", "-i", f"HOME={HOME}" if user else "HOME=/root", "LANG=C.UTF-8",
               f"PATH={HOME}/venv/bin:/usr/local/bin:/usr/bin:/bin"]
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                mounts + ' && cd / && exec chroot "$@"', "sh", *who, r, *env,
                "sh", "-c", f"cd {HOME} && exec \"$@\"" if user else 'exec "$@"', "sh", *cmd]

    def run(self, cmd, user=True, timeout=600):
        return run(self.argv(cmd, user), timeout=timeout)

    def popen(self, cmd, stderr):
        return subprocess.Popen(self.argv(cmd), stdout=subprocess.PIPE, stderr=stderr, text=True)


def debian_mirror():
    """$DDPRUN_DEBIAN_MIRROR, else the mirror this machine's apt uses for
    bookworm, else deb.debian.org."""
    if os.environ.get("DDPRUN_DEBIAN_MIRROR"):
        return os.environ["DDPRUN_DEBIAN_MIRROR"]
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            text = open(path).read()
        except OSError:
            continue
        for uri, suites in re.findall(r"^URIs:\s*(\S+)\s*\nSuites:\s*([^\n]*)", text, re.M):
            if "bookworm" in suites.split() and not uri.rstrip("/").endswith("-security"):
                return uri
        m = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def make_base(base, log):
    """debootstrap's minbase with python3 and python3-venv, and the user."""
    if os.path.exists(os.path.join(base, ".complete")):
        return subprocess.Popen(["true"]), None
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(os.path.dirname(base), exist_ok=True)
    mirror = debian_mirror()
    script = (f'debootstrap --variant=minbase --include=python3,python3-venv bookworm "{base}" "{mirror}" && '
              f'chroot "{base}" useradd --create-home --shell /bin/sh {USER} && '
              f'mkdir -p "{base}/opt/torch2" && touch "{base}/.complete"')
    return subprocess.Popen(["sh", "-c", script], stdout=log, stderr=subprocess.STDOUT), mirror


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return {}


def checksum(text):
    m = re.findall(r"checksum ([0-9a-f]{16})", text)
    return m[-1] if m else None


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    src, torch2_venv, work = (os.path.abspath(a) for a in sys.argv[1:])
    if os.geteuid() != 0:
        say("SKIPPED: making and entering a bare root needs root (debootstrap, chroot, mount)")
        return 77
    for tool in ("debootstrap", "unshare", "chroot"):
        if not shutil.which(tool):
            fail(f"{tool} is not installed (scripts/install-deps.sh tests installs it)")
    site = glob.glob(os.path.join(torch2_venv, "lib", "python3*", "site-packages"))
    if not site or not os.path.isdir(os.path.join(site[0], "torch")):
        fail(f"no PyTorch in {torch2_venv} (scripts/setup-torch2.sh --venv-only makes it)")
    pyver = os.path.basename(os.path.dirname(site[0]))  # python3.11

    # The bare root (I/O: the network and dpkg) comes while the wheel
    # compiles (CPU).
    base = os.path.join(work, "base")
    t0 = time.monotonic()
    os.makedirs(work, exist_ok=True)
    root_log = open(os.path.join(work, "debootstrap.log"), "w+")
    debootstrap, mirror = make_base(base, root_log)
    wheel_log = os.path.join(work, "build-wheel.log")
    with open(wheel_log, "w") as log:
        built = subprocess.run([os.path.join(src, "scripts", "build-wheel.sh")], cwd=src, stdout=log,
                               stderr=subprocess.STDOUT, env=dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="2"))
    t_wheel = time.monotonic() - t0
    if built.returncode != 0:
        print(open(wheel_log).read())
        fail("scripts/build-wheel.sh exited with %d" % built.returncode)
    wheels = glob.glob(os.path.join(src, "dist", "ddprun-*.whl"))
    if len(wheels) != 1:
        fail(f"expected one wheel in dist/, found {wheels}")
    wheel = wheels[0]
    tag = re.search(r"-py3-none-(manylinux_(\d+)_(\d+)_x86_64)\.whl$", wheel)
    if not tag:
        fail(f"{os.path.basename(wheel)}: not a py3-none-manylinux_X_Y_x86_64 wheel")
    shown = run([os.path.join(src, "build", "wheel-tools", "bin", "auditwheel"), "show", wheel]).stdout
    say("auditwheel show: " + " ".join(shown.split()).split(". ")[0])
    if f'"{tag.group(1)}"' not in shown:
        fail(f"auditwheel does not find the wheel consistent with its own tag {tag.group(1)}")
    say(f"wheel {os.path.basename(wheel)}: {os.path.getsize(wheel) / 1e6:.1f} MB, built in {t_wheel:.0f} s")

    if debootstrap.wait() != 0:
        root_log.seek(0)
        print(root_log.read())
        fail(f"debootstrap of bookworm from {mirror} failed (DDPRUN_DEBIAN_MIRROR names another mirror)")
    t_root = time.monotonic() - t0
    root_path = os.path.join(work, "run")
    shutil.rmtree(root_path, ignore_errors=True)
    if run(["cp", "-a", base, root_path]).returncode != 0:
        fail(f"copying {base}")
    try:
        return in_the_root(BareRoot(root_path, torch2_venv), src, wheel, pyver, t_root)
    finally:
        shutil.rmtree(root_path, ignore_errors=True)


def in_the_root(root, src, wheel, pyver, t_root):
    # Nothing of the build in it.
    pkgs = root.run(["dpkg-query", "-W", "-f=${Package}\\n"], user=False).stdout.split()
    bad = [p for p in pkgs if FORBIDDEN.search(p)]
    if len(pkgs) < 50 or bad:
        fail(f"the bare root has {len(pkgs)} packages, of which a build's: {bad}")
    say(f"bare Debian 12 root: {len(pkgs)} packages, no -dev, gRPC, protobuf, spdlog, libraft or compiler "
        f"(ready after {t_root:.0f} s)")
    # What every machine has and debootstrap leaves out: names for the
    # loopback and this host (torchrun's --standalone store is at
    # "localhost"; Gloo binds to the address of the host's name).
    with open(root.path + "/etc/hosts", "w") as f:
        f.write(f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n127.0.1.1\t{os.uname().nodename}\n")
    theirs = root.run(["python3", "-c", "import sys; print('python%d.%d' % sys.version_info[:2])"]).stdout.strip()
    if theirs != pyver:
        fail(f"the bare root's Python is {theirs}, the PyTorch venv's {pyver}: its PyTorch cannot load there")
    home = root.path + HOME
    for f in (wheel, *(os.path.join(src, "examples", "python", n) for n in ("ddp_hello.py", "plain_loop_healed.py"))):
        shutil.copy(f, home)
    run(["chroot", root.path, "chown", "-R", f"{USER}:{USER}", HOME])

    # A user without root, in a fresh venv that sees PyPI's PyTorch.
    r = root.run(["sh", "-c", "id -u && ! touch /usr/lib/ddprun-was-here 2>/dev/null"])
    if r.returncode != 0 or r.stdout.split()[0] == "0":
        fail(f"the user is root or may write /usr: {r.stdout}")
    r = root.run(["python3", "-m", "venv", "venv"])
    if r.returncode != 0:
        fail("python3 -m venv: " + r.stdout)
    with open(f"{home}/venv/lib/{pyver}/site-packages/user-pytorch.pth", "w") as f:
        f.write(f"/opt/torch2/lib/{pyver}/site-packages\n")
    t = time.monotonic()
    r = root.run(["pip", "install", "--no-index", "--disable-pip-version-check", os.path.basename(wheel)])
    t_pip = time.monotonic() - t
    if r.returncode != 0:
        fail("pip install the wheel: " + r.stdout)
    say(f"pip install {os.path.basename(wheel)}: {t_pip:.1f} s")

    # The version, one place (python/ddprun/__init__.py), said by each.
    with open(os.path.join(src, "python", "ddprun", "__init__.py")) as f:
        version = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)
    said = root.run(["ddprun", "--version"]).stdout.strip()
    shown = root.run(["pip", "show", "ddprun"]).stdout
    if not re.fullmatch(rf"ddprun {re.escape(version)} \(commit [0-9a-f]{{12}}\)", said):
        fail(f"ddprun --version said {said!r}, not version {version} and a commit")
    if f"Version: {version}\n" not in shown:
        fail(f"pip show ddprun does not say Version: {version}:\n{shown}")
    torch_version = root.run(["python", "-c", "import torch; print(torch.__version__)"]).stdout.strip()
    say(f"{said}; pip show: Version {version}; the user's PyTorch {torch_version}")

    # ddp_hello under ddprun and under torchrun: the same line.
    t = time.monotonic()
    ours = root.run(["ddprun", "--nproc", "2", "ddp_hello.py"])
    t_first = time.monotonic() - t
    t = time.monotonic()
    theirs = root.run(["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                       "ddp_hello.py"])
    t_torchrun = time.monotonic() - t
    # (Both put "[rank0]:" before a line of rank 0's, torchrun when asked.)
    line = re.compile(r"^(?:\[rank0\]:)?(2 ranks learned y = .*)$", re.M)
    a, b = line.findall(ours.stdout), line.findall(theirs.stdout)
    if ours.returncode != 0 or theirs.returncode != 0 or len(a) != 1 or a != b:
        fail(f"ddp_hello: ddprun ({ours.returncode}) said {a}, torchrun ({theirs.returncode}) said {b}\n"
             f"--- ddprun:\n{ours.stdout}\n--- torchrun:\n{theirs.stdout}")
    say(f"ddp_hello: ddprun and torchrun both say {a[0]!r} (ddprun's first job: {t_first:.1f} s, "
        f"torchrun's: {t_torchrun:.1f} s)")

    # plain_loop_healed: uninterrupted, then rank 1 SIGKILLed at step 10.
    # ddprun by its path, the venv not on PATH (a job script on a cluster):
    # the scripts run under the venv's Python, not the system's python3
    # (which has no PyTorch here).
    job = ["env", "PATH=/usr/bin:/bin", f"{HOME}/venv/bin/ddprun", "--nproc", "2", "plain_loop_healed.py",
           "--print-steps"]
    ref = root.run(job)
    want = checksum(ref.stdout)
    if ref.returncode != 0 or not want:
        fail(f"the uninterrupted plain_loop_healed run ({ref.returncode}):\n{ref.stdout}")
    err_file = open(os.path.join(os.path.dirname(root.path), "healed.err"), "w+")
    p = root.popen(job, err_file)
    lines, killed = [], None
    for l in p.stdout:  # rank 0's steps, as they come
        lines.append(l)
        if killed is None and re.fullmatch(r"(\[rank0\]:)?step 10 done", l.strip()):
            # ddprun is p.pid itself (each command of the chain execs the
            # next), its workers its children (bench/recovery.py's).
            workers = [pid for pid in working_children(p.pid)
                       if b"DDPRUN_STANDBY_FD" not in (e := environ(pid)) and e.get(b"LOCAL_RANK") == b"1"]
            if len(workers) != 1:
                p.kill()
                fail(f"expected one worker of local rank 1 at step 10, found {workers}")
            killed = workers[0]
            os.kill(killed, signal.SIGKILL)
    p.wait()
    err_file.seek(0)
    err = err_file.read()
    out = "".join(lines)
    if killed is None:
        fail(f"the job never printed 'step 10 done':\n{out}\n{err}")
    if p.returncode != 0 or "replacing it while the other workers go on" not in err:
        fail(f"the job with rank 1 killed ({p.returncode}) did not heal:\n{out}\n{err}")
    if checksum(out) != want:
        fail(f"healed run's checksum {checksum(out)}, an uninterrupted run's {want}:\n{out}\n{err}")
    say(f"plain_loop_healed: rank 1 (pid {killed}) SIGKILLed at step 10, healed, checksum {want} as uninterrupted")
    print("PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
