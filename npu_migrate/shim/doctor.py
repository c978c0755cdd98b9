"""Environment doctor: can this machine run the migrated code, and on which accelerator?

``python -m <this package> [--json] [--no-color] [--require npu|cuda|any]`` runs it; so does
``npu-migrate doctor``, which loads this very file. It replaces hand-written check scripts.

Each check returns a ``Check`` record: name, status, detail, hint. The statuses:

* ``ok``   -- checked and fine;
* ``warn`` -- works, but worth a look (npu-smi not on PATH, the driver's version.info not visible
  while the NPU computes, a variable that hides every GPU, a host with no accelerator at all);
* ``fail`` -- something is present but broken or mismatched (torch_npu missing on an Ascend host,
  not importing or not pairing with torch, CANN not set up, the driver's version.info missing
  while no NPU computes, no device, a computation on the device that raises, an invalid
  ``ASCEND_RT_VISIBLE_DEVICES`` or HCCL value), or an accelerator that ``--require`` asks for is
  missing;
* ``skip`` -- does not apply to this host, or needs something an earlier check found missing.

Exit code: 1 when any check fails, else 0. A CPU-only host with neither torch_npu nor a CUDA build
of torch exits 0 -- the shim then takes the CUDA path, which on such a host is the original code's
own CPU fallback -- unless ``--require npu``, ``--require cuda`` or ``--require any`` asks for an
accelerator.

Which checks run depends on what the host has:

* NPU host: torch_npu is installed, or Ascend software is present (the driver's version.info,
  ``npu-smi``, ``/dev/davinciN``, ``ASCEND_HOME_PATH`` / ``ASCEND_TOOLKIT_HOME``). Checks: torch_npu
  imports, torch/torch_npu versions pair, CANN environment, driver version file, npu-smi, device
  count, a tiny computation on ``npu:0``, ``ASCEND_RT_VISIBLE_DEVICES``, HCCL variables for
  multi-card runs. A missing torch_npu is a failure here.
* CUDA host: otherwise, when torch is a CUDA (or ROCm) build or ``nvidia-smi`` is on PATH. Checks:
  the torch build, nvidia-smi, device count, a tiny computation on ``cuda:0``,
  ``CUDA_VISIBLE_DEVICES``, NCCL.
* CPU host: neither. One ``accelerator`` record says so plainly.

``NPU_COMPAT_DEVICE=cuda`` (the shim's escape hatch) skips the NPU checks, as it skips the NPU.

Every probe is injectable (``Probes``: environment, ``which``, file reader, directory listing,
module import, subprocess runner) so tests fake each failure without hardware. This module imports
only the standard library when it is imported -- torch is imported by the checks, through
``Probes.import_module`` -- and nothing from its own package, so npu-migrate can load it from its
file on a machine where torch is missing. Not verifiable without Ascend hardware: the exact text
of real torch_npu / CANN / npu-smi errors; the checks only rely on exceptions and exit codes.
"""

import argparse
import importlib
import importlib.util
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys

OK = "ok"
WARN = "warn"
FAIL = "fail"
SKIP = "skip"
STATUSES = (OK, WARN, FAIL, SKIP)

REQUIRE_CHOICES = ("npu", "cuda", "any")

# The shim's escape hatch (the package's DEVICE_ENV; this module must not import its package).
DEVICE_ENV = "NPU_COMPAT_DEVICE"

# CANN's set_env.sh: ascend-toolkit/ up to CANN 8.3, cann/ in the CANN 8.5 / 9.x install layout.
SET_ENV_SCRIPTS = (
    "/usr/local/Ascend/ascend-toolkit/set_env.sh",
    "/usr/local/Ascend/cann/set_env.sh",
)
# The driver's install record: ``Driver_Install_Path_Param=<base>``; the driver's version file
# is ``<base>/driver/version.info`` with a ``Version=...`` line (default base /usr/local/Ascend).
ASCEND_INSTALL_INFO = "/etc/ascend_install.info"
DEFAULT_ASCEND_BASE = "/usr/local/Ascend"

TOOL_TIMEOUT = 10  # seconds for ``npu-smi info`` / ``nvidia-smi -L``

_RELEASE = re.compile(r"^\s*v?(\d+)\.(\d+)\.(\d+)")
_DAVINCI = re.compile(r"^davinci\d+$")


# ---------------------------------------------------------------------------------------------
# Records and the report


class Check(object):
    """One finding of the doctor."""

    __slots__ = ("name", "status", "detail", "hint")

    def __init__(self, name, status, detail, hint=""):
        if status not in STATUSES:
            raise ValueError("unknown status {!r}".format(status))
        self.name = name
        self.status = status
        self.detail = detail
        self.hint = hint

    def as_dict(self):
        return {"name": self.name, "status": self.status, "detail": self.detail, "hint": self.hint}

    def __repr__(self):
        return "Check({!r}, {!r}, {!r})".format(self.name, self.status, self.detail)


class Report(object):
    """All checks of one run, and the kind of host they were chosen for."""

    def __init__(self, host, checks):
        self.host = host  # "npu", "cuda" or "cpu"
        self.checks = list(checks)

    def get(self, name):
        """The check called ``name`` (None if it did not run)."""
        for check in self.checks:
            if check.name == name:
                return check
        return None

    def summary(self):
        counts = dict((status, 0) for status in STATUSES)
        for check in self.checks:
            counts[check.status] += 1
        return counts

    @property
    def exit_code(self):
        return 1 if any(check.status == FAIL for check in self.checks) else 0

    def as_dict(self):
        return {
            "host": self.host,
            "checks": [check.as_dict() for check in self.checks],
            "summary": self.summary(),
            "exit_code": self.exit_code,
        }


# ---------------------------------------------------------------------------------------------
# Probes: everything the doctor looks at, replaceable by tests.


def _read_text(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _is_installed(name):
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _run(argv, timeout):
    """Run a tool; (returncode, stdout, stderr). Raises OSError or subprocess.TimeoutExpired."""
    proc = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout
    )
    return proc.returncode, proc.stdout, proc.stderr


class Probes(object):
    """The doctor's view of the machine. Each argument replaces one probe (for tests):

    environ (mapping), which(name) -> path or None, read_text(path) -> str (raises OSError),
    exists(path) -> bool, is_dir(path) -> bool, list_dir(path) -> names (raises OSError),
    import_module(name) -> module (raises), is_installed(name) -> bool,
    run(argv, timeout) -> (returncode, stdout, stderr) (raises OSError / TimeoutExpired),
    python_version (str), executable (str).
    """

    def __init__(self, environ=None, which=None, read_text=None, exists=None, is_dir=None,
                 list_dir=None, import_module=None, is_installed=None, run=None,
                 python_version=None, executable=None):
        self.environ = os.environ if environ is None else environ
        self.which = which or shutil.which
        self.read_text = read_text or _read_text
        self.exists = exists or os.path.exists
        self.is_dir = is_dir or os.path.isdir
        self.list_dir = list_dir or os.listdir
        self.import_module = import_module or importlib.import_module
        self.is_installed = is_installed or _is_installed
        self.run = run or _run
        self.python_version = python_version or sys.version.split()[0]
        self.executable = executable or sys.executable or "?"


# ---------------------------------------------------------------------------------------------
# Helpers


def _error(exc, limit=200):
    """``Type: first line of the message``, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > limit:
        text = text[:limit - 3].rstrip() + "..."
    return "{}: {}".format(type(exc).__name__, text).rstrip(": ")


def release(version):
    """The ``(major, minor, patch)`` a version string starts with, or None.

    "2.7.1+cpu" -> (2, 7, 1); "2.7.1.post1" -> (2, 7, 1); "2.9.0rc1" -> (2, 9, 0).
    """
    match = _RELEASE.match(str(version))
    if match is None:
        return None
    return tuple(int(part) for part in match.groups())


def _dotted(parts):
    return ".".join(str(part) for part in parts)


def _env(environ, name):
    """The variable's value, None when unset."""
    value = environ.get(name)
    return None if value is None else str(value)


def _int_env(environ, name):
    try:
        return int(str(environ.get(name, "")).strip())
    except ValueError:
        return None


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


def _guarded(name, function, *args):
    """Run one check; an exception in the check itself becomes a fail record, never a crash."""
    try:
        return function(*args)
    except Exception as exc:  # a doctor reports, it does not crash
        return Check(name, FAIL, "the check itself raised {}".format(_error(exc)),
                     "please report this with the output of the doctor")


def _guarded_pair(name, function, *args):
    """``_guarded`` for checks that return (value, Check): (None, fail record) when one raises."""
    try:
        return function(*args)
    except Exception as exc:  # a doctor reports, it does not crash
        return None, Check(name, FAIL, "the check itself raised {}".format(_error(exc)),
                           "please report this with the output of the doctor")


def davinci_count(probes):
    """How many Ascend devices the host (or container) exposes as /dev/davinciN; None if unknown."""
    try:
        names = probes.list_dir("/dev")
    except OSError:
        return None
    count = sum(1 for name in names if _DAVINCI.match(name))
    return count or None


def driver_version_path(probes):
    """Where the driver's version.info should be, from /etc/ascend_install.info or the default."""
    base = DEFAULT_ASCEND_BASE
    try:
        text = probes.read_text(ASCEND_INSTALL_INFO)
    except OSError:
        text = ""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "Driver_Install_Path_Param" and value.strip():
            base = value.strip().strip("\"'")
    return base.rstrip("/") + "/driver/version.info"


def ascend_signs(probes):
    """What says this is an Ascend host, apart from torch_npu itself (for 'torch_npu missing')."""
    signs = []
    for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if _env(probes.environ, name):
            signs.append("{} is set".format(name))
    if probes.exists(driver_version_path(probes)):
        signs.append("the Ascend driver is installed")
    if probes.which("npu-smi"):
        signs.append("npu-smi is on PATH")
    if davinci_count(probes):
        signs.append("/dev/davinci devices exist")
    return signs


def _tiny_computation(torch, device):
    """Two additions on ``device``, read back on the host: raises when the device cannot compute."""
    x = torch.ones(4, device=device)
    value = float((x + x).sum().item())
    if value != 8.0:
        raise ArithmeticError("expected 8.0, the device computed {!r}".format(value))
    return value


# ---------------------------------------------------------------------------------------------
# Checks common to every host


def check_python(probes):
    return Check("python", OK, "{} ({})".format(probes.python_version, probes.executable))


def import_torch(probes):
    """(torch module or None, its Check)."""
    try:
        torch = probes.import_module("torch")
    except Exception as exc:
        return None, Check("torch", FAIL, "torch is not importable: {}".format(_error(exc)),
                           "pip install torch (on an Ascend host: the torch release your torch_npu "
                           "is built for)")
    version = str(getattr(torch, "__version__", "unknown"))
    build = getattr(torch, "version", None)
    cuda = getattr(build, "cuda", None)
    hip = getattr(build, "hip", None)
    if cuda:
        kind = "CUDA {} build".format(cuda)
    elif hip:
        kind = "ROCm {} build".format(hip)
    else:
        kind = "CPU build"
    return torch, Check("torch", OK, "{} ({})".format(version, kind))


def check_device_env(environ):
    value = _env(environ, DEVICE_ENV)
    if value.strip().lower() == "cuda":
        return Check(DEVICE_ENV, WARN, "'cuda' forces the CUDA path: NPU checks skipped",
                     "unset {} to use an NPU".format(DEVICE_ENV))
    return Check(DEVICE_ENV, WARN, "{!r} is ignored: only 'cuda' means something".format(value),
                 "unset it, or set it to cuda to force the CUDA path")


def check_require(require, host):
    wanted = {"npu": ("npu",), "cuda": ("cuda",), "any": ("npu", "cuda")}[require]
    names = {"npu": "an Ascend NPU (torch_npu)", "cuda": "a CUDA GPU",
             "any": "an accelerator (Ascend NPU or CUDA GPU)"}
    if host in wanted:
        return Check("require", OK, "{} host, as --require {} asks".format(host, require))
    return Check("require", FAIL, "--require {} needs {}; this is a {} host".format(
        require, names[require], host),
        "run on a machine with {}, or drop --require".format(names[require]))


# ---------------------------------------------------------------------------------------------
# Ascend NPU checks


def import_torch_npu(probes, torch, signs):
    """(torch_npu module or None, its Check). Only called on an NPU host."""
    if torch is None:
        return None, Check("torch_npu", SKIP, "needs torch")
    if not probes.is_installed("torch_npu"):
        wanted = release(getattr(torch, "__version__", ""))
        pin = "=={}".format(_dotted(wanted)) if wanted else ""
        return None, Check(
            "torch_npu", FAIL,
            "torch_npu is not installed, but this is an Ascend host ({})".format(", ".join(signs)),
            "pip install torch-npu{} (the torch_npu release built for this torch)".format(pin))
    try:
        torch_npu = probes.import_module("torch_npu")
    except Exception as exc:
        hint = "check that CANN is set up (set_env.sh) and that torch and torch_npu pair"
        if getattr(getattr(torch, "version", None), "cuda", None):
            hint = ("torch_npu needs the CPU build of torch, this torch is a CUDA build: "
                    "pip install torch=={} --index-url https://download.pytorch.org/whl/cpu".format(
                        _dotted(release(torch.__version__) or (0, 0, 0))))
        return None, Check("torch_npu", FAIL, "installed but import fails: {}".format(_error(exc)), hint)
    return torch_npu, Check("torch_npu", OK, str(getattr(torch_npu, "__version__", "unknown")))


# torch_npu's package version is the torch release it is built for, as "X.Y.Z" or
# "X.Y.Z.postN" (pre-releases "X.Y.ZrcN"): 2.7.1, 2.7.1.post1 ... 2.7.1.post10 all pair with
# torch 2.7.1, 2.12.0 with torch 2.12.0. The TorchNPU product versions (7.2.0, 26.0.0, 26.1.0)
# only name branches: "v2.7.1-26.1.0" ships torch_npu 2.7.1.post8 for torch 2.7.1.
# Sources: Ascend/pytorch README "Ascend Extension for PyTorch Version Matching Table" and
# COMPATIBILITY.md ("TorchNPU安装包版本: 以配套的PyTorch版本号为基础, {PyTorch版本} 或
# {PyTorch版本}.postN"); the torch_npu 2.7.1 wheel requires torch==2.7.1+cpu and the 2.14.0
# wheel torch==2.14.0.* (rules/torch_npu_api.json lists both wheels).


def check_versions(torch, torch_npu):
    if torch is None or torch_npu is None:
        return Check("versions", SKIP, "needs torch and torch_npu")
    torch_version = str(getattr(torch, "__version__", ""))
    npu_version = str(getattr(torch_npu, "__version__", ""))
    torch_release, npu_release = release(torch_version), release(npu_version)
    if torch_release is None or npu_release is None:
        return Check("versions", WARN, "cannot compare torch {!r} with torch_npu {!r}".format(
            torch_version, npu_version), "torch_npu X.Y.Z[.postN] pairs with torch X.Y.Z")
    if torch_release == npu_release:
        return Check("versions", OK, "torch {} pairs with torch_npu {}".format(torch_version, npu_version))
    return Check(
        "versions", FAIL,
        "torch {} with torch_npu {}: torch_npu {} is built for torch {} only".format(
            torch_version, npu_version, npu_version, _dotted(npu_release)),
        "install the torch_npu built for this torch (pip install torch-npu=={}, or a {}.postN), "
        "or the torch this torch_npu is built for (torch=={})".format(
            _dotted(torch_release), _dotted(torch_release), _dotted(npu_release)))


def _set_env_hint(probes):
    for script in SET_ENV_SCRIPTS:
        if probes.exists(script):
            return "source {}".format(script)
    return "source {} (or the set_env.sh of your CANN install)".format(SET_ENV_SCRIPTS[0])


def check_cann(probes, torch_npu):
    environ = probes.environ
    homes = [(name, _env(environ, name)) for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")]
    homes = [(name, value) for name, value in homes if value]
    if not homes:
        return Check("cann", FAIL, "ASCEND_HOME_PATH and ASCEND_TOOLKIT_HOME are unset: the CANN "
                     "toolkit environment is not loaded", _set_env_hint(probes))
    missing = [(name, value) for name, value in homes if not probes.is_dir(value)]
    if missing:
        name, value = missing[0]
        return Check("cann", FAIL, "{}={} is not a directory".format(name, value), _set_env_hint(probes))
    detail = ", ".join("{}={}".format(name, value) for name, value in homes)
    version = None
    if torch_npu is not None:
        try:
            version = torch_npu.npu.utils.get_cann_version()
        except Exception:
            version = None  # informative only
    if version:
        detail = "CANN {}; {}".format(version, detail)
    if len(homes) == 2 and homes[0][1].rstrip("/") != homes[1][1].rstrip("/"):
        return Check("cann", WARN, detail + " (they differ)",
                     "source one CANN set_env.sh only: {}".format(_set_env_hint(probes)[len("source "):]))
    return Check("cann", OK, detail)


def check_driver(probes, device_works=False):
    """The driver's version.info. Missing is a failure, unless a computation on the NPU just
    worked: then the driver is there and only its version file is not visible (a container)."""
    path = driver_version_path(probes)
    try:
        text = probes.read_text(path)
    except OSError as exc:
        problem = "is missing"
        if not isinstance(exc, FileNotFoundError):
            problem = "cannot be read ({})".format(_error(exc))
        hint = "in a container, mount {} from the host".format(path)
        if device_works:
            return Check("driver", WARN, "{} {}, but the NPU computes: the driver works".format(
                path, problem), hint)
        return Check("driver", FAIL, "{} {}".format(path, problem),
                     "install the NPU driver; " + hint + ", with the driver's lib64")
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "Version" and value.strip():
            return Check("driver", OK, "{} ({})".format(value.strip(), path))
    return Check("driver", WARN, "{} has no Version= line".format(path),
                 "reinstall the NPU driver if npu-smi info fails too")


def check_npu_smi(probes):
    path = probes.which("npu-smi")
    if not path:
        return Check("npu-smi", WARN, "npu-smi is not on PATH (training does not need it)",
                     "add the driver's npu-smi to PATH; in a container, mount it from the host")
    try:
        code, out, err = probes.run([path, "info"], TOOL_TIMEOUT)
    except subprocess.TimeoutExpired:
        return Check("npu-smi", FAIL, "`npu-smi info` did not answer within {}s".format(TOOL_TIMEOUT),
                     "the driver or a device hangs: check dmesg and the device health")
    except OSError as exc:
        return Check("npu-smi", FAIL, "{} cannot run: {}".format(path, _error(exc)))
    if code != 0:
        return Check("npu-smi", FAIL, "`npu-smi info` failed (exit {}): {}".format(
            code, _first_line(err, out)), "the NPU driver is not working: check the driver install")
    return Check("npu-smi", OK, "{} (`npu-smi info` ok)".format(path))


def check_npu_devices(torch, torch_npu, environ):
    """(visible device count or None, its Check)."""
    if torch_npu is None:
        return None, Check("npu devices", SKIP, "needs torch_npu")
    try:
        available = bool(torch.npu.is_available())
        count = int(torch.npu.device_count())
    except Exception as exc:
        return None, Check("npu devices", FAIL, "torch.npu raised {}".format(_error(exc)),
                           "check the driver (npu-smi info) and CANN (set_env.sh)")
    if count <= 0 or not available:
        visible = _env(environ, "ASCEND_RT_VISIBLE_DEVICES")
        hint = "check the driver (npu-smi info) and that the devices are visible here (container)"
        if visible is not None:
            hint = "ASCEND_RT_VISIBLE_DEVICES={!r} may hide every device: fix or unset it".format(visible)
        return 0, Check("npu devices", FAIL, "no NPU: torch.npu.is_available() is {}, "
                        "device_count() is {}".format(available, count), hint)
    try:
        name = str(torch.npu.get_device_name(0))
    except Exception as exc:
        name = "name unavailable: {}".format(_error(exc))
    return count, Check("npu devices", OK, "{} visible ({})".format(count, name))


def check_compute(name, torch, device, count):
    if not count:
        return Check(name, SKIP, "no device to compute on")
    try:
        _tiny_computation(torch, device)
    except Exception as exc:
        return Check(name, FAIL, "ones(4) + ones(4) on {} raised {}".format(device, _error(exc)),
                     "the device is visible but cannot run kernels: check the driver, CANN and "
                     "the torch/torch_npu pairing")
    return Check(name, OK, "ones(4) + ones(4) on {} sums to 8".format(device))


def check_ascend_visible(environ, physical):
    """ASCEND_RT_VISIBLE_DEVICES: comma-separated ids, no spaces, strictly ascending, in range.

    CANN reads the ids up to the first other character; torch_npu's device count is 0 when the
    list is not ascending (CANN env var reference "ASCEND_RT_VISIBLE_DEVICES": logical ids,
    comma-separated, ascending only). ``physical``: devices of this host or container, or None.
    """
    name = "ASCEND_RT_VISIBLE_DEVICES"
    value = _env(environ, name)
    if value is None:
        return Check(name, OK, "unset: every device is visible")
    if value.strip() == "":
        return Check(name, FAIL, "set but empty: no device is visible", "unset it or list device ids")
    tokens = value.split(",")
    bad = [token for token in tokens if not token.isdigit()]
    if bad:
        return Check(name, FAIL, "{!r}: {!r} is not a device id (CANN reads only the ids before it)"
                     .format(value, bad[0]), "comma-separated ids, no spaces, e.g. 0,1,2,3")
    ids = [int(token) for token in tokens]
    duplicated = sorted(set(i for i in ids if ids.count(i) > 1))
    if duplicated:
        return Check(name, FAIL, "{!r}: duplicated id {}".format(value, duplicated[0]),
                     "list each device once, in ascending order")
    if ids != sorted(ids):
        return Check(name, FAIL, "{!r} is not ascending: torch_npu then sees no device".format(value),
                     "{}={}".format(name, ",".join(str(i) for i in sorted(ids))))
    if physical is not None and ids[-1] >= physical:
        return Check(name, FAIL, "{!r}: id {} is out of range, this host has {} device(s) (0-{})"
                     .format(value, ids[-1], physical, physical - 1),
                     "use ids below {}".format(physical))
    scope = "" if physical is not None else " (range not checked: device total unknown)"
    return Check(name, OK, "{} visible: {}{}".format(len(ids), value, scope))


def _float(value):
    try:
        return float(value.strip())
    except ValueError:
        return None


def _int(value):
    try:
        return int(value.strip())
    except ValueError:
        return None


def _ip(value):
    try:
        ipaddress.ip_address(value.strip())
        return True
    except ValueError:
        return False


def _ifnames(value):
    body = value.strip()
    for prefix in ("^=", "^", "="):
        if body.startswith(prefix):
            body = body[len(prefix):]
            break
    parts = body.split(",")
    return bool(body) and all(part.strip() and " " not in part.strip() for part in parts)


# HCCL variables and the values CANN accepts (CANN "Environment Variables" reference, collective
# communication: HCCL_CONNECT_TIMEOUT integer [120, 7200] s, default 120; HCCL_EXEC_TIMEOUT
# seconds, default 1836, range per product (0 = never on A2/A3); HCCL_BUFFSIZE integer >= 1 MB,
# default 200; HCCL_IF_IP one IPv4/IPv6 host address; HCCL_SOCKET_IFNAME NIC names or prefixes,
# comma-separated, with optional ^ (exclude) and = (exact); HCCL_IF_IP takes precedence over
# HCCL_SOCKET_IFNAME; HCCL_WHITELIST_DISABLE 0 or 1, default 1, 0 needs HCCL_WHITELIST_FILE).
HCCL_RULES = (
    ("HCCL_CONNECT_TIMEOUT", lambda v: _int(v) is not None and 120 <= _int(v) <= 7200,
     "an integer number of seconds in [120, 7200]"),
    ("HCCL_EXEC_TIMEOUT", lambda v: _float(v) is not None and _float(v) >= 0,
     "a number of seconds >= 0"),
    ("HCCL_BUFFSIZE", lambda v: _int(v) is not None and _int(v) >= 1, "an integer number of MB >= 1"),
    ("HCCL_IF_IP", _ip, "one IPv4 or IPv6 address of this host"),
    ("HCCL_SOCKET_IFNAME", _ifnames, "NIC names or prefixes, comma-separated (eth,enp / =eth0 / ^docker)"),
    ("HCCL_WHITELIST_DISABLE", lambda v: v.strip() in ("0", "1"), "0 or 1"),
)


def check_hccl(probes, count, torch):
    """HCCL settings for multi-card runs: only checked when more than one card takes part."""
    environ = probes.environ
    world = _int_env(environ, "WORLD_SIZE")
    local_world = _int_env(environ, "LOCAL_WORLD_SIZE")
    multi_card = (world or 0) > 1 or (count or 0) > 1
    if not multi_card:
        return Check("hccl", SKIP, "single device: HCCL is not used")
    problems, notes = [], []
    for name, valid, expected in HCCL_RULES:
        value = _env(environ, name)
        if value is None:
            continue
        notes.append("{}={}".format(name, value))
        if not valid(value):
            problems.append("{}={!r} is not {}".format(name, value, expected))
    if (_env(environ, "HCCL_WHITELIST_DISABLE") or "").strip() == "0":
        whitelist = _env(environ, "HCCL_WHITELIST_FILE")
        if not whitelist or not probes.exists(whitelist):
            problems.append("HCCL_WHITELIST_DISABLE=0 needs HCCL_WHITELIST_FILE naming an existing file")
    if torch is not None:
        try:
            distributed = torch.distributed
            hccl = distributed.is_available() and distributed.is_hccl_available()
        except Exception:
            # torch_npu sets torch.distributed.is_hccl_available (torch_npu/__init__.py, 2.7.1);
            # without it (a fake, an older build) the backend is not judged here.
            hccl = None
        if hccl is False:
            problems.append("torch.distributed reports no HCCL backend")
    scope = "{} card(s)".format(count) if count else "WORLD_SIZE={}".format(world)
    if problems:
        return Check("hccl", FAIL, "{}: {}".format(scope, "; ".join(problems)),
                     "fix or unset the variable (CANN's environment variable reference lists the values)")
    multi_node = world is not None and local_world is not None and world > local_world
    if multi_node and not (_env(environ, "HCCL_IF_IP") or _env(environ, "HCCL_SOCKET_IFNAME")):
        return Check("hccl", WARN, "multi-node run (WORLD_SIZE={}, LOCAL_WORLD_SIZE={}) without "
                     "HCCL_IF_IP or HCCL_SOCKET_IFNAME: HCCL picks a NIC by itself".format(
                         world, local_world),
                     "export HCCL_SOCKET_IFNAME=<nic> (or HCCL_IF_IP=<this host's ip>) on every node")
    if not notes:
        return Check("hccl", OK, "{}: HCCL variables unset, defaults apply (HCCL_CONNECT_TIMEOUT "
                     "120 s, HCCL_BUFFSIZE 200 MB)".format(scope))
    return Check("hccl", OK, "{}: {}".format(scope, ", ".join(notes)))


def npu_checks(probes, torch, signs):
    checks = []
    torch_npu, record = _guarded_pair("torch_npu", import_torch_npu, probes, torch, signs)
    checks.append(record)
    checks.append(_guarded("versions", check_versions, torch, torch_npu))
    checks.append(_guarded("cann", check_cann, probes, torch_npu))
    count, devices = _guarded_pair("npu devices", check_npu_devices, torch, torch_npu, probes.environ)
    compute = _guarded("npu compute", check_compute, "npu compute", torch, "npu:0", count)
    checks.append(_guarded("driver", check_driver, probes, compute.status == OK))
    checks.append(_guarded("npu-smi", check_npu_smi, probes))
    checks.append(devices)
    checks.append(compute)
    checks.append(_guarded("ASCEND_RT_VISIBLE_DEVICES", check_ascend_visible, probes.environ,
                           davinci_count(probes)))
    checks.append(_guarded("hccl", check_hccl, probes, count, torch))
    return checks


# ---------------------------------------------------------------------------------------------
# CUDA checks


def check_cuda_build(torch, nvidia_smi):
    if torch is None:
        return Check("cuda build", SKIP, "needs torch")
    build = getattr(torch, "version", None)
    cuda, hip = getattr(build, "cuda", None), getattr(build, "hip", None)
    if cuda:
        return Check("cuda build", OK, "torch built with CUDA {}".format(cuda))
    if hip:
        return Check("cuda build", OK, "torch built with ROCm {} (torch.cuda drives AMD GPUs)".format(hip))
    return Check("cuda build", FAIL, "torch {} is a CPU-only build, but nvidia-smi is on PATH ({})"
                 .format(getattr(torch, "__version__", "?"), nvidia_smi),
                 "install a CUDA build of torch (see pytorch.org, 'Get started')")


def check_nvidia_smi(probes):
    """(GPU count from `nvidia-smi -L` or None, its Check)."""
    path = probes.which("nvidia-smi")
    if not path:
        return None, Check("nvidia-smi", WARN, "nvidia-smi is not on PATH",
                           "install the NVIDIA driver utilities, or mount them into the container")
    try:
        code, out, err = probes.run([path, "-L"], TOOL_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, Check("nvidia-smi", FAIL, "`nvidia-smi -L` did not answer within {}s"
                           .format(TOOL_TIMEOUT), "the driver or a GPU hangs: check dmesg")
    except OSError as exc:
        return None, Check("nvidia-smi", FAIL, "{} cannot run: {}".format(path, _error(exc)))
    if code != 0:
        return None, Check("nvidia-smi", FAIL, "`nvidia-smi -L` failed (exit {}): {}".format(
            code, _first_line(out, err)), "the NVIDIA driver is not working")
    gpus = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return gpus, Check("nvidia-smi", OK, "{} GPU(s) listed by {}".format(gpus, path))


def check_cuda_devices(torch):
    """(visible GPU count or None, its Check)."""
    build = getattr(torch, "version", None) if torch is not None else None
    if torch is None or not (getattr(build, "cuda", None) or getattr(build, "hip", None)):
        return None, Check("cuda devices", SKIP, "needs a CUDA build of torch")
    try:
        count = int(torch.cuda.device_count())
    except Exception as exc:
        return None, Check("cuda devices", FAIL, "torch.cuda raised {}".format(_error(exc)))
    if count <= 0:
        return 0, Check("cuda devices", FAIL, "torch.cuda.device_count() is 0",
                        "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES")
    try:
        name = str(torch.cuda.get_device_name(0))
    except Exception as exc:
        name = "name unavailable: {}".format(_error(exc))
    return count, Check("cuda devices", OK, "{} visible ({})".format(count, name))


def check_cuda_visible(environ, physical):
    """CUDA_VISIBLE_DEVICES as torch and CUDA parse it: ints or GPU-/MIG- UUIDs; a repeated entry
    hides every GPU; the list stops at the first negative or invalid entry."""
    name = "CUDA_VISIBLE_DEVICES"
    value = _env(environ, name)
    if value is None:
        return Check(name, OK, "unset: every GPU is visible")
    tokens = [token.strip() for token in value.split(",")]
    if value.strip() == "" or tokens[0].startswith("-"):
        return Check(name, WARN, "{!r} hides every GPU: the code runs on the CPU".format(value),
                     "unset it to use the GPUs")
    if tokens[0].startswith(("GPU-", "MIG-")):
        if len(set(tokens)) != len(tokens):
            return Check(name, FAIL, "{!r}: a repeated UUID hides every GPU".format(value),
                         "list each GPU once")
        return Check(name, OK, "{} GPU(s) by UUID".format(len(tokens)))
    ids = []
    for token in tokens:
        if token.startswith("-"):
            return Check(name, WARN, "{!r}: the entries from {!r} on are ignored".format(value, token),
                         "drop the negative entry if those GPUs should be visible")
        if not token.isdigit():
            return Check(name, FAIL, "{!r}: {!r} is not a GPU index (CUDA ignores it and what follows)"
                         .format(value, token), "comma-separated indices or GPU UUIDs")
        ids.append(int(token))
    duplicated = sorted(set(i for i in ids if ids.count(i) > 1))
    if duplicated:
        return Check(name, FAIL, "{!r}: repeated index {} hides every GPU".format(value, duplicated[0]),
                     "list each GPU once")
    if physical is not None and max(ids) >= physical:
        return Check(name, FAIL, "{!r}: index {} is out of range, nvidia-smi lists {} GPU(s)"
                     .format(value, max(ids), physical), "use indices below {}".format(physical))
    return Check(name, OK, "{} visible: {}".format(len(ids), value))


def check_nccl(torch, count):
    if torch is None:
        return Check("nccl", SKIP, "needs torch")
    try:
        distributed = torch.distributed
        available = bool(distributed.is_available() and distributed.is_nccl_available())
    except Exception as exc:
        available, reason = False, _error(exc)
    else:
        reason = "torch.distributed.is_nccl_available() is False"
    if available:
        return Check("nccl", OK, "torch.distributed has the NCCL backend")
    if (count or 0) > 1:
        return Check("nccl", FAIL, "{} GPUs but no NCCL: {}".format(count, reason),
                     "install a torch build with NCCL for multi-GPU runs")
    return Check("nccl", WARN, "no NCCL backend ({}); single-GPU runs do not need it".format(reason))


def cuda_checks(probes, torch):
    nvidia_smi = probes.which("nvidia-smi")
    checks = [_guarded("cuda build", check_cuda_build, torch, nvidia_smi)]
    physical, record = _guarded_pair("nvidia-smi", check_nvidia_smi, probes)
    checks.append(record)
    count, record = _guarded_pair("cuda devices", check_cuda_devices, torch)
    checks.append(record)
    checks.append(_guarded("cuda compute", check_compute, "cuda compute", torch, "cuda:0", count))
    checks.append(_guarded("CUDA_VISIBLE_DEVICES", check_cuda_visible, probes.environ, physical))
    checks.append(_guarded("nccl", check_nccl, torch, count))
    return checks


# ---------------------------------------------------------------------------------------------
# The run


def run_checks(probes=None, require=None):
    """Run every check that applies to this host; returns a Report (exit code: Report.exit_code)."""
    if require is not None and require not in REQUIRE_CHOICES:
        raise ValueError("require must be one of {}, got {!r}".format(REQUIRE_CHOICES, require))
    probes = probes or Probes()
    checks = [check_python(probes)]
    torch, record = import_torch(probes)
    checks.append(record)
    forced = str(probes.environ.get(DEVICE_ENV, "")).strip().lower() == "cuda"
    if _env(probes.environ, DEVICE_ENV) is not None:
        checks.append(check_device_env(probes.environ))
    npu_installed = probes.is_installed("torch_npu")
    signs = [] if forced else ascend_signs(probes)
    if not forced and (npu_installed or signs):
        host = "npu"
        checks.extend(npu_checks(probes, torch, signs))
    else:
        if npu_installed:
            checks.append(Check("torch_npu", SKIP, "installed, not imported ({}=cuda)".format(DEVICE_ENV)))
        else:
            checks.append(Check("torch_npu", SKIP, "not installed"))
        build = getattr(torch, "version", None) if torch is not None else None
        accelerated_build = getattr(build, "cuda", None) or getattr(build, "hip", None)
        if accelerated_build or probes.which("nvidia-smi"):
            host = "cuda"
            checks.extend(cuda_checks(probes, torch))
        else:
            host = "cpu"
            checks.append(Check(
                "accelerator", WARN,
                "no Ascend NPU and no CUDA GPU: torch_npu is not installed, {} and nvidia-smi is "
                "not on PATH. The shim takes the CUDA path, which here is the original code's CPU "
                "fallback".format("torch is a CPU build" if torch is not None else "torch is missing"),
                "to use an accelerator, install torch_npu (Ascend) or a CUDA build of torch"))
    if require is not None:
        checks.append(check_require(require, host))
    return Report(host, checks)


# ---------------------------------------------------------------------------------------------
# Output

_ANSI = {OK: "32", WARN: "33", FAIL: "31", SKIP: "2"}


def use_color(stream, environ=None, no_color=False):
    """ANSI colours only on a terminal, and never with NO_COLOR in the environment."""
    environ = os.environ if environ is None else environ
    if no_color or "NO_COLOR" in environ:
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except Exception:
        return False


def summary_line(report):
    counts = report.summary()
    return "summary: {} ok, {} warn, {} fail, {} skip -> exit {}".format(
        counts[OK], counts[WARN], counts[FAIL], counts[SKIP], report.exit_code)


def render_text(report, color=False, header=()):
    """The report as a plain-text table (ANSI green/yellow/red status only when ``color``)."""
    lines = list(header)
    width = max([len("check")] + [len(check.name) for check in report.checks])
    lines.append("{}  {}  {}".format("check".ljust(width), "status", "detail"))
    for check in report.checks:
        status = check.status.ljust(6)
        if color:
            status = "\x1b[{}m{}\x1b[0m".format(_ANSI[check.status], status)
        lines.append("{}  {}  {}".format(check.name.ljust(width), status, check.detail))
        if check.hint:
            lines.append("{}  {}  hint: {}".format(" " * width, " " * 6, check.hint))
    lines.append("")
    lines.append("host: {}; {}".format(report.host, summary_line(report)))
    return "\n".join(lines) + "\n"


def render_json(report, extra=None):
    """The report as a JSON object: host, checks, summary, exit_code (plus ``extra`` keys)."""
    payload = report.as_dict()
    payload.update(extra or {})
    return json.dumps(payload, indent=2) + "\n"


def build_parser(prog=None):
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Check that this machine can run the migrated code (Ascend NPU, CUDA or CPU). "
                    "Exit 1 when a check fails.")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of the table")
    parser.add_argument("--no-color", action="store_true", help="no ANSI colours, even on a terminal")
    parser.add_argument("--require", choices=REQUIRE_CHOICES, default=None,
                        help="fail unless this accelerator is present (any: NPU or CUDA)")
    return parser


def main(argv=None, probes=None, stream=None, prog=None, shim_info=None):
    """Run the doctor; print the table (or JSON); return the exit code 0/1.

    ``shim_info`` (dict: package, version, device_type, reason) is what the installed shim
    detected; ``python -m <this package>`` passes it, shown above the table and under "shim" in JSON.
    """
    args = build_parser(prog).parse_args(argv)
    probes = probes or Probes()
    stream = stream or sys.stdout
    report = run_checks(probes, require=args.require)
    if args.json:
        stream.write(render_json(report, {"shim": shim_info} if shim_info else None))
    else:
        header = []
        if shim_info:
            header = [
                "{} {} (runtime shim of npu-migrate)".format(shim_info["package"], shim_info["version"]),
                "device type:  {}".format(shim_info["device_type"]),
                "reason:       {}".format(shim_info["reason"]),
                "",
            ]
        color = use_color(stream, probes.environ, args.no_color)
        stream.write(render_text(report, color=color, header=header))
    return report.exit_code
