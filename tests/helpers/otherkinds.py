"""Real artifacts for the cuda-compute, FlashInfer, DeepGEMM and torch-ext adapter tests.

- cubins and PTX: real Triton kernels compiled on the CPU for each arch (``kernels.build_cache``);
- host shared objects and objects: g++ builds of a tiny C++ file;
- torch extensions: ``torch.utils.cpp_extension.load`` in a subprocess (see test_adapter_torch_ext.py).

Damage helpers change one thing on a copy: an age, a length, a header field.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import struct
import subprocess

from jitwarden.cli.main import main
from tests.helpers import kernels

EM_AARCH64 = 183


def triton_artifacts(dest: str, archs=(80, 90, 120)) -> dict[int, dict[str, str]]:
    """{arch: {"cubin": path, "ptx": path}} of one real ``add_kernel`` per arch."""
    jobs = kernels.jobs_for(archs=archs, variants=kernels.VARIANTS[:1])
    built = kernels.build_cache(os.path.join(dest, "triton"), jobs)
    return {
        j["arch"]: {
            "cubin": os.path.join(j["path"], f"{j['name']}.cubin"),
            "ptx": os.path.join(j["path"], f"{j['name']}.ptx"),
        }
        for j in built
    }


CPP = 'extern "C" int jw_probe(int x) { return x + 1; }\n'


def gxx_so(dest_dir: str, stem: str) -> dict[str, str]:
    """Compile a tiny C++ file with g++ into ``<stem>.o`` and ``<stem>.so`` in ``dest_dir``."""
    os.makedirs(dest_dir, exist_ok=True)
    src = os.path.join(dest_dir, f".{stem}.cpp")
    with open(src, "w") as f:
        f.write(CPP)
    obj, so = os.path.join(dest_dir, f"{stem}.o"), os.path.join(dest_dir, f"{stem}.so")
    subprocess.run(["g++", "-fPIC", "-c", src, "-o", obj], check=True)
    subprocess.run(["g++", "-shared", obj, "-o", so], check=True)
    os.remove(src)
    return {"o": obj, "so": so}


def set_age(path: str, seconds: float) -> None:
    """Make ``path`` (and everything under it) look last written ``seconds`` ago."""
    import time

    t = time.time() - seconds
    for d, dirs, files in os.walk(path):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (t, t), follow_symlinks=False)
    os.utime(path, (t, t), follow_symlinks=False)


def truncate(path: str, keep: float = 0.5) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(size * keep))


def set_machine(path: str, machine: int) -> None:
    """Rewrite e_machine in an ELF header (what the quick check reads), as a build for another CPU would have."""
    with open(path, "r+b") as f:
        f.seek(18)
        f.write(struct.pack("<H", machine))


def copytree(src: str, dst: str) -> str:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def verify(capsys, *args) -> tuple[int, dict]:
    rc = main(["verify", "--format", "json", *args])
    return rc, json.loads(capsys.readouterr().out)


def codes(doc) -> dict[str, list[str]]:
    return {e["id"]: sorted(f["code"] for f in e["findings"]) for e in doc["entries"]}


def root_codes(doc) -> list[str]:
    return sorted(f["code"] for c in doc["caches"] for f in c["findings"])


def clean_codes(root: str, kind: str, codes_: tuple[str, ...], judge_kw=None):
    """Scan ``root`` as ``kind``, plan a clean of entries with ``codes_`` and carry it out (quarantine)."""
    from jitwarden.model.entries import CacheRoot
    from jitwarden.ops import maintenance, scan
    from jitwarden.ops import plans as cleanplan

    report = scan.scan(
        [(CacheRoot(kind=kind, path=root, source="cli"), None)],
        scan.make_judge(**(judge_kw or {"target_arch": 90})),
        scan.Target(90, "cli"),
    )
    plan = cleanplan.plan_clean(report, cleanplan.selection(codes=codes_, now=report.judge.now))
    return plan, maintenance.clean(plan.actions)


def files_under(path: str) -> list[str]:
    return sorted(
        os.path.relpath(p, path)
        for p in glob.glob(os.path.join(path, "**"), recursive=True)
        if os.path.isfile(p)
    )


def elf_with_section(name: bytes, content: bytes) -> bytes:
    """A minimal ELF64: header, one data section, .shstrtab, section table."""
    shstr = b"\0" + name + b"\0.shstrtab\0"
    data_off = 64
    str_off = data_off + len(content)
    sh_off = (str_off + len(shstr) + 7) & ~7
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, sh_off, 0, 64, 0, 0, 64, 3, 2)
    body = ehdr + content + shstr
    body += b"\0" * (sh_off - len(body))
    sh = lambda n, t, off, size: struct.pack("<IIQQQQIIQQ", n, t, 0, 0, off, size, 0, 0, 8, 0)  # noqa: E731
    body += (
        sh(0, 0, 0, 0)
        + sh(1, 1, data_off, len(content))
        + sh(1 + len(name) + 1, 3, str_off, len(shstr))
    )
    return body
