"""Facts about this machine: memory, swap, load, and the macOS-only figures behind one interface.

Every macOS-only source (sysctl iogpu.wired_limit_mb, vm_stat, memory_pressure, caffeinate) is
a small function that runs one command and a parser tested against recorded output. Each fails
soft: a missing tool or an unexpected output means a missing figure (None), never a crash.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from zyquo_tui.core.system.entry_points import PROBE, python_command

IS_MACOS = sys.platform == "darwin"


def run_command(argv: list[str], timeout: float = 5.0) -> str | None:
    """stdout of a short command, or None when it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


# -- macOS: parsers of recorded outputs (tests/data/macos/) ------------------------------------

def parse_sysctl_value(output: str | None) -> int | None:
    """`sysctl -n iogpu.wired_limit_mb` prints a number (0 means the default limit)."""
    if not output:
        return None
    try:
        return int(output.strip())
    except ValueError:
        return None


def parse_vm_stat(output: str | None) -> dict[str, int] | None:
    """Pages from `vm_stat`, converted to bytes: free, active, inactive, wired, compressed..."""
    if not output:
        return None
    size_match = re.search(r"page size of (\d+) bytes", output)
    if not size_match:
        return None
    page = int(size_match.group(1))
    figures = {}
    for line in output.splitlines()[1:]:
        match = re.match(r'^"?([^":]+)"?:\s+(\d+)\.?$', line.strip())
        if match:
            key = match.group(1).strip().lower().replace("pages ", "").replace(" ", "_")
            figures[key] = int(match.group(2)) * page
    return figures or None


def parse_memory_pressure(output: str | None) -> int | None:
    """Free memory percentage from `memory_pressure` ("System-wide memory free percentage: 63%")."""
    if not output:
        return None
    match = re.search(r"System-wide memory free percentage:\s*(\d+)%", output)
    return int(match.group(1)) if match else None


def wired_limit_bytes() -> int | None:
    """The GPU wired memory limit set by `sysctl iogpu.wired_limit_mb`, when one is set."""
    if not IS_MACOS:
        return None
    mb = parse_sysctl_value(run_command(["sysctl", "-n", "iogpu.wired_limit_mb"]))
    return mb * 1024 * 1024 if mb else None


def memory_free_percent() -> int | None:
    if not IS_MACOS:
        return None
    return parse_memory_pressure(run_command(["memory_pressure", "-Q"]))


def caffeinate_prefix() -> list[str]:
    """Keep a Mac awake while the trainer runs (`caffeinate -i`); nothing elsewhere."""
    if IS_MACOS and shutil.which("caffeinate"):
        return ["caffeinate", "-i"]
    return []


# -- every platform -----------------------------------------------------------------------------

@dataclass
class MemoryFacts:
    """Memory figures in bytes; None where this machine cannot tell."""

    total_bytes: int
    available_bytes: int
    used_by_others_bytes: int
    swap_used_bytes: int
    wired_limit_bytes: int | None = None
    free_percent: int | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def memory_facts() -> MemoryFacts:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return MemoryFacts(
        total_bytes=int(vm.total),
        available_bytes=int(vm.available),
        used_by_others_bytes=int(vm.total - vm.available),
        swap_used_bytes=int(swap.used),
        wired_limit_bytes=wired_limit_bytes(),
        free_percent=memory_free_percent(),
    )


def peak_resident_bytes(max_rss: int | None = None, platform: str = sys.platform,
                        status: str | None = None) -> int | None:
    """This process's peak resident footprint in bytes.

    On Linux, VmHWM of /proc/self/status: the high-water mark of this process's own address
    space, which exec starts afresh. getrusage's ru_maxrss there keeps the parent's mark
    through fork and exec, so a trainer or a measurement started by a process of 1 GiB reads 1
    GiB before it loads anything. Elsewhere, and where /proc cannot be read, ru_maxrss: bytes on
    macOS (whether a parent's mark survives exec there is not measured), KiB on Linux and the
    other Unixes. `max_rss`, `platform` and `status` (the text of
    /proc/self/status) let a test give recorded figures. None where neither can be read.
    """
    if max_rss is None and platform.startswith("linux"):
        high_water = _vm_hwm_bytes(status)
        if high_water is not None:
            return high_water
    if max_rss is None:
        try:
            import resource
        except ImportError:  # not a Unix
            return None
        max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(max_rss) if platform == "darwin" else int(max_rss) * 1024


def _vm_hwm_bytes(status: str | None = None) -> int | None:
    """VmHWM of /proc/self/status (`status`: a recorded text of it) in bytes, or None."""
    if status is None:
        try:
            with open("/proc/self/status", encoding="ascii", errors="replace") as file:
                status = file.read()
        except OSError:
            return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024  # the kernel writes kB, meaning KiB
    return None


def resident_bytes() -> int | None:
    """This process's resident footprint now, in bytes."""
    try:
        return int(psutil.Process().memory_info().rss)
    except psutil.Error:
        return None


def cpu_load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def probe_mlx(python: str | None = None, timeout: float = 60.0) -> dict | None:
    """What MLX sees (versions, device, memory limit), from a subprocess; None if it fails."""
    try:
        done = subprocess.run(
            python_command(PROBE, python=python),
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return None


def unwritable_reason(folder: Path) -> str | None:
    """Why files cannot be created in `folder` (or, before it exists, in its nearest existing
    parent, where it would be made); None when they can.

    It tries: permission bits say nothing to root, nor of /proc or a read-only mount. The
    probe is a folder made and removed at once; nothing else is created.
    """
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            return f"no part of {folder} exists"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    try:
        made = tempfile.mkdtemp(prefix=".zyquo-probe-", dir=probe)
    except OSError as error:
        return f"cannot create files in {probe} ({error.strerror or error})"
    os.rmdir(made)
    return None


# -- macOS: GPU use from macmon (sudoless; `brew install macmon`) -------------------------------

@dataclass
class GpuUse:
    """One `macmon pipe` sample: how busy the GPU is, and what the machine draws."""

    gpu_percent: float  # of the time the GPU was busy over the sample
    gpu_mhz: int | None = None
    gpu_watts: float | None = None
    total_watts: float | None = None  # CPU + GPU + ANE (macmon's all_power)


def parse_macmon_pipe(output: str | None) -> GpuUse | None:
    """The last JSON line of `macmon pipe -s N`: `gpu_usage` is [MHz, busy fraction 0-1]."""
    if not output:
        return None
    for line in reversed(output.strip().splitlines()):
        try:
            sample = json.loads(line)
            mhz, busy = sample["gpu_usage"]
            power = sample.get("gpu_power")
            total = sample.get("all_power")
            return GpuUse(gpu_percent=round(float(busy) * 100, 1), gpu_mhz=int(mhz),
                          gpu_watts=float(power) if power is not None else None,
                          total_watts=float(total) if total is not None else None)
        except (ValueError, KeyError, TypeError):
            continue
    return None


def gpu_use(interval_ms: int = 500) -> GpuUse | None:
    """GPU use over one sample of `macmon pipe` (needs no sudo); None where it is missing."""
    if not IS_MACOS:
        return None
    return parse_macmon_pipe(run_command(["macmon", "pipe", "-s", "1", "-i", str(interval_ms)],
                                         timeout=5.0 + interval_ms / 1000))
