"""The H100 capture of issue 47: a pulled bundle of gpu_proof's transformer block installs every entry.

On the H100 (torch 2.11+cu130, Triton 3.6) ``pull`` refused the AOTAutograd result
``aotautograd/acwciwtf…`` ("loads FX graph fjhbykqy…, which is missing from fxgraph/") although the
bundle carried that FX graph: each entry was judged alone in a staging dir of its own. The builder's
cache is committed (``tests/data/real/h100_oci_block_builder.tgz``); its 32 entries (the paths the H100's
pull listed) are bundled here for the H100's fingerprint (this machine's, with the H100's GPU, driver and
torch), signed, pushed to a real ``docker-registry`` on loopback and pulled with ``--fingerprint``, so
every entry is judged for sm_90 as the H100 judged it.
"""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import replace

import pytest

pytest.importorskip("cryptography", reason="signed bundles need the [fleet] extra (cryptography)")

from tests.helpers import registry as reghelp
from tests.helpers.cli import environ
from tests.helpers.fleet import jw, node_env

HERE = os.path.dirname(__file__)
CAPTURE = os.path.join(HERE, "..", "data", "real", "h100_oci_block_builder.tgz")
PULLED = os.path.join(HERE, "..", "..", "benchmarks", "results", "h100_oci_before_fix.json")
H100_DIGEST = "360162ab874850e7"
AOT = "aotautograd/acwciwtfcyu6evwwpataarbvievoxkmna564xa32b42recsmc54j"
FX = "fxgraph/jh/fjhbykqyuhtjxlm53oc2dr2dybxtuskxw7wdmgyeul57tanapkne"


def _h100_fingerprint(env: dict) -> dict:
    """This machine's fingerprint with the H100's GPU, driver and torch (what the judge decides by)."""
    from jitwarden.env import fingerprint

    with environ(env):
        d = fingerprint.of_host().to_json()
    d["gpu"] = {
        "source": "nvml",
        "note": "",
        "devices": [
            {
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "capability": [9, 0],
                "uuid": "GPU-118153ed-1e1e-db7d-37d9-cc1080e3a439",
                "pci_bus_id": "00000000:00:06.0",
            }
        ],
    }
    d["driver"] = {"version": "580.159.04", "cuda_driver_version": "13.0"}
    d["packages"] = [
        {**p, "version": "2.11.0", "cuda": "13.0"} if p["name"] == "torch" else p
        for p in d["packages"]
    ]
    fp = fingerprint.Fingerprint.from_json(d)
    return fp.to_json()


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    """The H100's 32 entries as a signed bundle for the H100's fingerprint, in a real registry."""
    from jitwarden.env.fingerprint import Fingerprint
    from jitwarden.formats import oci as wire
    from jitwarden.ops import bundle, keys
    from jitwarden.ops import oci as registry
    from jitwarden.store.blobfile import BlobFile

    exe = reghelp.binary()
    if exe is None:
        pytest.skip("no docker-registry on PATH (apt-get install docker-registry)")
    base = tmp_path_factory.mktemp("h100-oci")
    cap = base / "builder"
    with tarfile.open(CAPTURE) as tar:
        tar.extractall(cap, filter="data")
    with open(PULLED) as f:
        listed = [(e["kind"], e["path"]) for e in json.load(f)["pull"]["doc"]["entries"]]
    assert len(listed) == 32 and ("inductor", AOT) in listed and ("inductor", FX) in listed
    keydir = base / "keys"
    keydir.mkdir()
    env = node_env(str(base / "home"), JITWARDEN_SIGNING_KEY=str(keydir / "k"))
    assert jw(env, "keygen")[0] == 0
    fp_json = _h100_fingerprint(env)
    fp = Fingerprint.from_json(fp_json)
    parts = {k: str(cap / k / "jitwarden-v1" / H100_DIGEST) for k in ("triton", "inductor")}
    entries = []
    for kind, path in listed:
        rec = bundle.describe(kind, parts[kind], os.path.join(parts[kind], path), sealed=False)
        assert not isinstance(rec, str), (path, rec)
        entries.append(replace(rec, sealed=kind == "triton"))
    m = bundle.Manifest(fp.digest, fp_json, {"jitwarden": "h100"}, 1796634540.0, tuple(entries))
    signer = keys.load_signing_key(str(keydir / "k"))
    mbytes = bundle.manifest_bytes(m)
    sig = bundle.signature_record(mbytes, signer)
    reg = reghelp.Registry(exe, str(base / "registry"))
    ref = wire.parse_ref(f"{reg.host}/h200/kernels:block")
    client = registry.Registry(wire.Client(ref, insecure=True, timeout=30))
    with BlobFile() as layer:
        bundle.write_to(layer, m, parts, signer)
        registry.push(
            client, "block", layer, mbytes, registry.bundle_annotations(fp, signer.id, sig), sig
        )
    fp_file = base / "h100.json"
    fp_file.write_text(json.dumps(fp_json))
    yield {"ref": str(ref), "fp": str(fp_file), "pub": str(keydir / "k.pub"), "digest": fp.digest}
    reg.stop()


@pytest.mark.parametrize("flags", [(), ("--all-or-nothing",)])
def test_the_h100_block_bundle_installs_all_32_entries(pushed, tmp_path, flags):
    env = node_env(str(tmp_path / "node"), JITWARDEN_TRUSTED_KEYS=pushed["pub"])
    argv = ["pull", pushed["ref"], "--insecure", "--fingerprint", pushed["fp"], *flags]
    rc, out, err = jw(env, *argv, "--format", "json")
    doc = json.loads(out)
    assert rc == 0, [e for e in doc["entries"] if e["action"] != "installed"] or err
    assert doc["counts"] == {"installed": 32, "present": 0, "skipped": 0, "refused": 0}
    part = os.path.join(env["TORCHINDUCTOR_CACHE_DIR"], "jitwarden-v1", pushed["digest"])
    assert os.path.isdir(os.path.join(part, *AOT.split("/")))
    assert os.path.isdir(os.path.join(part, *FX.split("/")))
    rc, out, err = jw(env, "verify", part, "--target", "sm_90", "--format", "json")
    assert rc == 0, out + err
