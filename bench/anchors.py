"""The anchors the benchmarks measure ddprun against, found or set up in one
place.

- torchrun 2.x: PyPI's PyTorch in build/torch2-venv (scripts/setup-torch2.sh
  makes it; scripts/torch2-requirements.txt pins it), as
  `python -m torch.distributed.run`. Its workers run on the same Python, so
  a PyTorch script meets the same PyTorch under either launcher.
- torchft and nvidia-resiliency-ext (NVRx): bench/anchors-requirements.txt,
  installed into build/anchors-venv, a venv that sees build/torch2-venv's
  packages through a .pth file, so the test lane's venv stays as pinned
  (NVRx brings pynvml, whose import warning would reach every PyTorch
  script's stderr).

A benchmark that cannot get an anchor says so loudly (missing()) and keeps
its ddprun rows.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH2_VENV = os.path.join(ROOT, "build", "torch2-venv")
ANCHORS_VENV = os.path.join(ROOT, "build", "anchors-venv")


def missing(what, why):
    """The loud line for an anchor that did not run."""
    line = "*** ANCHOR NOT RUN: %s: %s ***" % (what, why)
    print("\n" + line + "\n", file=sys.stderr, flush=True)
    return line


def torch2_python(given=None):
    """The Python of PyTorch 2.x (build/torch2-venv's unless given), or None."""
    python = given or os.path.join(TORCH2_VENV, "bin", "python")
    return python if os.path.exists(python) else None


def torch_version(python):
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def torchrun(python):
    """argv of that Python's torchrun."""
    return [python, "-m", "torch.distributed.run"]


def torchrun_label(python):
    return "torchrun %s" % (torch_version(python) or "?")


def anchors_python():
    """build/anchors-venv's Python with torchft and NVRx, set up on first use;
    (python, None) or (None, why)."""
    base = torch2_python()
    if not base:
        return None, "%s is missing (run scripts/setup-torch2.sh)" % TORCH2_VENV
    python = os.path.join(ANCHORS_VENV, "bin", "python")
    reqs = os.path.join(ROOT, "bench", "anchors-requirements.txt")
    pins = os.path.join(ROOT, "scripts", "torch2-requirements.txt")
    stamp = os.path.join(ANCHORS_VENV, "installed-requirements.txt")
    wanted = open(reqs).read()
    if os.path.exists(stamp) and open(stamp).read() == wanted:
        return python, None
    try:
        subprocess.run([base, "-m", "venv", ANCHORS_VENV], check=True)
        site = subprocess.run([base, "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        mine = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(mine, "zz_torch2_venv.pth"), "w") as f:
            f.write(site + "\n")
        print("anchors: installing %s into %s" % (", ".join(l.split("==")[0] for l in wanted.split("\n")
                                                             if "==" in l and not l.startswith("#")), ANCHORS_VENV),
              file=sys.stderr, flush=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", reqs,
                        "-c", pins], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        return None, "could not set up %s: %s" % (ANCHORS_VENV, e)
    with open(stamp, "w") as f:
        f.write(wanted)
    return python, None


def package_version(python, name):
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version(%r))" % name],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "?"
