"""GPU and driver facts without initialising CUDA: NVML through ctypes, else /proc.

vLLM's parent process must stay CUDA-free (ARCHITECTURE.md, "Contracts"), so we never touch the CUDA
runtime. NVML (``libnvidia-ml.so.1``) is read-only and safe before a fork; when it is
absent we read ``/proc/driver/nvidia`` (driver version and GPU models, no compute
capability); when both fail the answer is ``("none", (), None, None)``. Never raises.

Standard library only: this module is on the activation path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jitwarden.model.errors import JitwardenError

NVML_LIB = "libnvidia-ml.so.1"


@dataclass(frozen=True, slots=True)
class Gpu:
    """One visible GPU. ``capability`` is None when the source cannot tell (``/proc``)."""

    index: int
    name: str
    capability: tuple[int, int] | None
    uuid: str | None
    pci_bus_id: str | None


@dataclass(frozen=True, slots=True)
class Probe:
    """What one GPU query found, and in words why a source was not used."""

    source: str  # "nvml", "proc" or "none"
    gpus: tuple[Gpu, ...]
    driver_version: str | None
    cuda_driver_version: str | None
    note: str = ""


def query(
    proc_root: str = "/proc", env: Mapping[str, str] | None = None
) -> tuple[str, tuple[Gpu, ...], str | None, str | None]:
    """(source, gpus, driver_version, cuda_driver_version); see :func:`probe`."""
    p = probe(proc_root, env)
    return p.source, p.gpus, p.driver_version, p.cuda_driver_version


def probe(
    proc_root: str = "/proc", env: Mapping[str, str] | None = None, use_nvml: bool = True
) -> Probe:
    """Ask NVML, then ``<proc_root>/driver/nvidia``; honour ``CUDA_VISIBLE_DEVICES``."""
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    notes = []
    if use_nvml:
        try:
            gpus, driver, cuda = _nvml_query()
            return Probe("nvml", filter_visible(gpus, cvd), driver, cuda)
        except Exception as exc:
            notes.append(f"nvml: {exc}")
    try:
        res = read_proc(proc_root)
    except Exception as exc:
        res = None
        notes.append(f"proc: {exc}")
    if res is not None:
        gpus, driver = res
        return Probe("proc", filter_visible(gpus, cvd), driver, None, "; ".join(notes))
    notes.append(f"proc: no {os.path.join(proc_root, 'driver', 'nvidia')}")
    return Probe("none", (), None, None, "; ".join(notes))


# --- CUDA_VISIBLE_DEVICES ---------------------------------------------------------


def _named(gpus: tuple[Gpu, ...], item: str) -> Gpu | None:
    """The GPU one ``CUDA_VISIBLE_DEVICES`` entry names: by NVML index, or by the one UUID it is a prefix of
    (``GPU-`` optional); None when it names none, or more than one."""
    if re.fullmatch(r"\d+", item):
        i = int(item)
        return next((g for g in gpus if g.index == i), None)
    if not item:
        return None
    want = item if item.upper().startswith("GPU-") else f"GPU-{item}"
    hits = [g for g in gpus if g.uuid and g.uuid.lower().startswith(want.lower())]
    return hits[0] if len(hits) == 1 else None


def filter_visible(gpus: tuple[Gpu, ...], cvd: str | None) -> tuple[Gpu, ...]:
    """Keep the GPUs ``CUDA_VISIBLE_DEVICES`` lists, in its order.

    Entries are indices or (prefixes of) ``GPU-`` UUIDs; like CUDA, the list stops at
    the first entry that matches nothing. ``MIG-`` entries cannot be mapped without
    MIG queries, so a list holding one leaves the GPUs unfiltered. Indices are NVML's
    (PCI bus) order, which is CUDA's when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or when the
    GPUs are alike; the digest only holds the set of (name, capability) anyway.
    """
    if cvd is None:
        return tuple(gpus)
    items = [x.strip() for x in cvd.split(",")]
    if any(x.upper().startswith("MIG-") for x in items):
        return tuple(gpus)
    out: list[Gpu] = []
    for item in items:
        match = _named(gpus, item)
        if match is None or match in out:
            break
        out.append(match)
    return tuple(out)


# --- /proc/driver/nvidia ------------------------------------------------------------

_DRIVER_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def parse_driver_version(text: str) -> str | None:
    """The version in ``/proc/driver/nvidia/version`` ("NVRM version: ... Kernel Module  580.65.06 ...")."""
    m = _DRIVER_RE.search(text)
    if m:
        return m.group(1)
    m = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else None


def parse_information(text: str) -> dict[str, str]:
    """``Key: value`` lines of ``/proc/driver/nvidia/gpus/<bus>/information``."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


PROC_MAX = 1 << 16
"""The driver's /proc files are a few hundred bytes; more is not read."""


def _proc_text(path: str) -> str:
    """A /proc/driver/nvidia text file through the bounded reader (OSError when it is not one we read)."""
    from jitwarden.store.reads import read_bytes

    return read_bytes(path, max_bytes=PROC_MAX).decode("utf-8", "replace")


def read_proc(proc_root: str = "/proc") -> tuple[tuple[Gpu, ...], str | None] | None:
    """(gpus ordered by PCI bus, driver version), or None without ``driver/nvidia``."""
    base = os.path.join(proc_root, "driver", "nvidia")
    if not os.path.isdir(base):
        return None
    driver = None
    try:
        driver = parse_driver_version(_proc_text(os.path.join(base, "version")))
    except OSError:
        pass
    gpus_dir = os.path.join(base, "gpus")
    try:
        buses = sorted(os.listdir(gpus_dir))
    except OSError:
        buses = []
    found = []
    for bus in buses:
        try:
            info = parse_information(_proc_text(os.path.join(gpus_dir, bus, "information")))
        except OSError:
            continue
        uuid = info.get("GPU UUID")
        found.append(
            (
                info.get("Bus Location") or bus,
                info.get("Model") or "unknown NVIDIA GPU",
                uuid if uuid and not uuid.startswith("?") else None,
            )
        )
    found.sort(key=lambda t: t[0].lower())
    gpus = tuple(
        Gpu(index=i, name=name, capability=None, uuid=uuid, pci_bus_id=bus)
        for i, (bus, name, uuid) in enumerate(found)
    )
    return gpus, driver


# --- NVML -------------------------------------------------------------------------


class NvmlError(JitwardenError, RuntimeError):
    """NVML is missing or a call of it failed (the fingerprint then reads /proc)."""


def _nvml_query() -> tuple[tuple[Gpu, ...], str | None, str | None]:
    import ctypes  # only here: /proc-only and memoised starts never pay for it

    try:
        lib = ctypes.CDLL(NVML_LIB)
    except OSError as exc:
        if "No such file" in str(exc) or "cannot open" in str(exc):
            raise NvmlError(f"{NVML_LIB} not found") from None
        raise NvmlError(f"{NVML_LIB} not loadable ({exc})") from None

    def call(name: str, *args: Any) -> None:
        fn = getattr(lib, name, None)
        if fn is None:
            raise NvmlError(f"{name} missing from {NVML_LIB}")
        rc = fn(*args)
        if rc != 0:
            raise NvmlError(f"{name} returned {rc}")

    call("nvmlInit_v2")
    try:
        buf = ctypes.create_string_buffer(96)
        driver = None
        try:
            call("nvmlSystemGetDriverVersion", buf, ctypes.c_uint(len(buf)))
            driver = buf.value.decode("ascii", "replace")
        except NvmlError:
            pass
        cuda = None
        v = ctypes.c_int(0)
        try:
            call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(v))
            cuda = f"{v.value // 1000}.{(v.value % 1000) // 10}"
        except NvmlError:
            pass
        count = ctypes.c_uint(0)
        call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        gpus = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(i), ctypes.byref(handle))
            name_buf = ctypes.create_string_buffer(96)
            call("nvmlDeviceGetName", handle, name_buf, ctypes.c_uint(len(name_buf)))
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            try:
                call(
                    "nvmlDeviceGetCudaComputeCapability",
                    handle,
                    ctypes.byref(major),
                    ctypes.byref(minor),
                )
                cap = (major.value, minor.value)
            except NvmlError:
                cap = None
            uuid = None
            ubuf = ctypes.create_string_buffer(96)
            try:
                call("nvmlDeviceGetUUID", handle, ubuf, ctypes.c_uint(len(ubuf)))
                uuid = ubuf.value.decode("ascii", "replace")
            except NvmlError:
                pass
            pci = _PciInfo()
            try:
                call("nvmlDeviceGetPciInfo_v3", handle, ctypes.byref(pci))
                bus = pci.busId.decode("ascii", "replace") or None
            except NvmlError:
                bus = None
            gpus.append(Gpu(i, name_buf.value.decode("utf-8", "replace"), cap, uuid, bus))
        return tuple(gpus), driver, cuda
    finally:
        try:
            lib.nvmlShutdown()
        except Exception:
            pass


def _pci_struct() -> Any:
    import ctypes

    class PciInfo(ctypes.Structure):  # nvmlPciInfo_t (v3)
        _fields_ = [
            ("busIdLegacy", ctypes.c_char * 16),
            ("domain", ctypes.c_uint),
            ("bus", ctypes.c_uint),
            ("device", ctypes.c_uint),
            ("pciDeviceId", ctypes.c_uint),
            ("pciSubSystemId", ctypes.c_uint),
            ("busId", ctypes.c_char * 32),
        ]

    return PciInfo


def _PciInfo() -> Any:
    global _PCI_CLS
    if _PCI_CLS is None:
        _PCI_CLS = _pci_struct()
    return _PCI_CLS()


_PCI_CLS: Any = None
