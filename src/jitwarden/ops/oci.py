"""Signed bundles in OCI registries: ``jitwarden push REF`` and ``jitwarden pull REF`` (docs/fleets.md, "OCI registries").

One bundle is one OCI artifact (an image manifest with its own ``artifactType``):

- the config blob is the bundle's ``manifest.json``, byte for byte (:data:`CONFIG_TYPE`), so a
  node reads the fingerprint a bundle was built for without downloading its layer;
- the one layer is the bundle tar itself (:data:`LAYER_TYPE`), ``manifest.json`` and
  ``manifest.sig`` first, exactly what ``export`` writes and ``import`` reads;
- the manifest's annotations carry the signature record (:data:`A_SIGNATURE`, the bytes of
  ``manifest.sig``) and what a person or a scheduler picks by: compute capability, driver,
  toolchain digest and fingerprint digest.

A tag holds an OCI image index of such manifests, one per fingerprint: pushing from another GPU,
driver or toolchain adds its bundle beside the others (the same fingerprint replaces its own).
``pull`` picks the manifest whose fingerprint is this node's, after checking the signature over
its config; it never installs anything of another candidate. The signature is also attached as an
OCI referrer (a manifest whose ``subject`` is the bundle's), listed through the referrers API
where the registry has one, else under the fallback tag ``sha256-<hex>`` (OCI distribution 1.1),
as ``oras`` and ``cosign`` do.

Decisions here are pure functions of what was read (``plan_index``, ``choose``); the network is
``formats/oci``; every digest is checked on the bytes it names before they are used.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass

from jitwarden.formats import jsonlimits
from jitwarden.formats import oci as wire
from jitwarden.model.errors import ExitStatus, JitwardenError
from jitwarden.ops import bundle
from jitwarden.store import reads
from jitwarden.store.blobfile import BlobFile

ARTIFACT_TYPE = "application/vnd.jitwarden.bundle.v1"
CONFIG_TYPE = "application/vnd.jitwarden.bundle.manifest.v1+json"
LAYER_TYPE = "application/vnd.jitwarden.bundle.v1+tar"
SIGNATURE_TYPE = "application/vnd.jitwarden.signature.v1"
SIGNATURE_LAYER = "application/vnd.jitwarden.signature.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"

A = "dev.jitwarden."
A_FINGERPRINT = A + "fingerprint"
A_CAPABILITY = A + "compute-capability"
A_DRIVER = A + "driver"
A_TOOLCHAIN = A + "toolchain"
A_SIGNATURE = A + "signature"
A_SIGNED_BY = A + "signed-by"
A_TITLE = "org.opencontainers.image.title"

MAX_CANDIDATES = 64
"""Manifests of one index judged at most (one per GPU/toolchain of a fleet: a handful)."""

MAX_LAYER = 64 << 30
"""The largest bundle layer pulled (a descriptor claiming more is refused before any byte is read)."""


class Refused(JitwardenError, ValueError):
    """What the registry holds must not be installed (a digest or signature that does not hold, a layout
    that is not a jitwarden bundle); the message says why in one line; the CLI exits 1."""

    exit_code = ExitStatus.FINDINGS


class NoMatch(Refused):
    """The tag holds no bundle for this node: ``lines`` says per candidate what differs."""

    def __init__(self, message: str, lines: list[str]):
        super().__init__(message)
        self.lines = lines


# ---------------------------------------------------------------- pure: descriptors, annotations, choice


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, data_digest: str, size: int, **extra) -> dict:
    return {"mediaType": media_type, "digest": data_digest, "size": size, **extra}


def toolchain_digest(fp_json: dict) -> str:
    """A digest of what builds the code (ptxas, packages, Python, code-gen variables) of a fingerprint (pure)."""
    part = {k: fp_json.get(k) for k in ("ptxas", "packages", "python", "env")}
    return hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()[:16]


def bundle_annotations(fp, signer_id: str | None, sig: bytes | None) -> dict:
    """The annotations a bundle's manifest (and its index entry) carries for fingerprint ``fp`` (pure)."""
    archs = fp.device_archs()
    out = {
        A_FINGERPRINT: fp.digest,
        A_CAPABILITY: ",".join(f"sm_{a}" for a in archs) or "none",
        A_DRIVER: fp.driver_version or "none",
        A_TOOLCHAIN: toolchain_digest(fp.to_json()),
    }
    if sig is not None:
        out[A_SIGNATURE] = sig.decode()
        out[A_SIGNED_BY] = signer_id or ""
    return out


def bundle_manifest(config: dict, layer: dict, notes: dict) -> bytes:
    """The OCI image manifest of one bundle (canonical JSON bytes, what its digest names)."""
    doc = {
        "schemaVersion": 2,
        "mediaType": wire.OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": config,
        "layers": [layer],
        "annotations": notes,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def plan_index(current: dict | None, entry: dict) -> dict:
    """The index a tag holds after ``entry`` (a manifest descriptor with annotations) is pushed to it (pure).

    The entry of the same fingerprint is replaced, the others kept, in order; an index's own
    annotations kept. Refused when the tag holds something that is not a jitwarden index.
    """
    kept: list = []
    if current is not None:
        if current.get("mediaType") != wire.OCI_INDEX or not isinstance(
            current.get("manifests"), list
        ):
            raise Refused(
                "the tag holds something other than a jitwarden bundle index; push to another tag"
            )
        fpd = entry["annotations"][A_FINGERPRINT]
        for d in current["manifests"]:
            if not isinstance(d, dict) or d.get("artifactType") != ARTIFACT_TYPE:
                raise Refused(
                    "the tag's index lists a manifest that is no jitwarden bundle; push to another tag"
                )
            if (d.get("annotations") or {}).get(A_FINGERPRINT) != fpd:
                kept.append(d)
    return {
        "schemaVersion": 2,
        "mediaType": wire.OCI_INDEX,
        "artifactType": ARTIFACT_TYPE,
        "manifests": [*kept, entry],
    }


def candidates(doc: dict, raw: bytes) -> list[dict]:
    """The bundle manifests a tag's document offers: the entries of an index, or the one manifest it is (pure)."""
    mt = doc.get("mediaType")
    if mt == wire.OCI_INDEX:
        ms = doc.get("manifests")
        if not isinstance(ms, list):
            raise Refused("the index lists no manifests")
        out = [
            d
            for d in ms
            if isinstance(d, dict)
            and d.get("artifactType") == ARTIFACT_TYPE
            and d.get("mediaType") == wire.OCI_MANIFEST
            and isinstance(d.get("digest"), str)
            and wire.DIGEST.match(d["digest"])
            and isinstance(d.get("size"), int)
            and 0 < d["size"] <= wire.MAX_MANIFEST
        ]
        if not out:
            raise Refused("the index lists no jitwarden bundle")
        return out[:MAX_CANDIDATES]
    if mt == wire.OCI_MANIFEST and doc.get("artifactType") == ARTIFACT_TYPE:
        return [
            descriptor(
                wire.OCI_MANIFEST,
                sha256_digest(raw),
                len(raw),
                artifactType=ARTIFACT_TYPE,
                annotations=doc.get("annotations") or {},
            )
        ]
    raise Refused(f"not a jitwarden bundle (media type {str(mt)[:80]!r})")


def choose(cands: list[dict], digest: str) -> dict | None:
    """The candidate whose fingerprint annotation is ``digest`` exactly; None when none is (pure).

    Refused, naming both, when two are: which one a tag means is then a guess (a push's index is one
    bundle per fingerprint; two are a hand-made or tampered index)."""
    picks = [d for d in cands if (d.get("annotations") or {}).get(A_FINGERPRINT) == digest]
    if len(picks) > 1:
        raise Refused(
            f"the index lists {len(picks)} bundles of fingerprint {digest} ({picks[0]['digest']} and "
            f"{picks[1]['digest']}): which one it means is a guess; push again to leave one"
        )
    return picks[0] if picks else None


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A bundle manifest's parts, checked: the config and layer descriptors and the signature record."""

    config: dict
    layer: dict
    signature: bytes | None
    notes: dict


def layout_of(raw: bytes) -> Layout:
    """The parts of a bundle manifest; Refused unless it is one (pure)."""
    try:
        doc = jsonlimits.loads(raw, max_bytes=wire.MAX_MANIFEST)
        config, layers = doc["config"], doc["layers"]
        notes = doc.get("annotations") or {}
        ok = (
            doc.get("artifactType") == ARTIFACT_TYPE
            and config.get("mediaType") == CONFIG_TYPE
            and isinstance(layers, list)
            and len(layers) == 1
            and layers[0].get("mediaType") == LAYER_TYPE
            and isinstance(notes, dict)
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise Refused("the manifest is not a jitwarden bundle (artifact type, config or layer)")
    for d, bound, what in (
        (config, bundle.MAX_MANIFEST, "config"),
        (layers[0], MAX_LAYER, "layer"),
    ):
        if not (
            isinstance(d.get("digest"), str)
            and wire.DIGEST.match(d["digest"])
            and isinstance(d.get("size"), int)
            and 0 < d["size"] <= bound
        ):
            raise Refused(
                f"the bundle's {what} descriptor has no valid digest and size within {bound} bytes"
            )
    sig = notes.get(A_SIGNATURE)
    return Layout(
        config=config,
        layer=layers[0],
        signature=sig.encode() if isinstance(sig, str) else None,
        notes=notes,
    )


# ---------------------------------------------------------------- credentials


def credentials(registry: str, env) -> tuple[str, str] | None:
    """(user, password) for ``registry`` as ``docker login``/``podman login`` filed them: ``REGISTRY_AUTH_FILE``,
    else ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json`` (``auths.<host>.auth``, base64
    ``user:password``, or ``username``/``password``). None when none is filed. ValueError (one line)
    for a file that is not such JSON."""
    named = env.get("REGISTRY_AUTH_FILE")
    path = named or os.path.join(
        env.get("DOCKER_CONFIG")
        or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".docker"),
        "config.json",
    )
    try:
        doc = reads.read_json(path, max_bytes=1 << 20, follow=True)
    except FileNotFoundError:
        if named:
            raise ValueError(f"REGISTRY_AUTH_FILE={named}: no such file") from None
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{path}: cannot read registry credentials ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    auths = doc.get("auths") if isinstance(doc, dict) else None
    if not isinstance(auths, dict):
        return None
    for key in (registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/"):
        rec = auths.get(key)
        if isinstance(rec, dict):
            return _pair(rec, path)
    return None


def _pair(rec: dict, path: str) -> tuple[str, str] | None:
    if isinstance(rec.get("auth"), str) and rec["auth"]:
        try:
            user, sep, password = (
                base64.b64decode(rec["auth"], validate=True).decode().partition(":")
            )
        except (ValueError, UnicodeDecodeError):
            sep = ""
        if not sep:
            raise ValueError(f"{path}: an 'auth' that is not base64 of user:password")
        return user, password
    if isinstance(rec.get("username"), str) and isinstance(rec.get("password"), str):
        return rec["username"], rec["password"]
    return None


# ---------------------------------------------------------------- the registry's side


class Registry:
    """One repository of one registry, through ``formats/oci``: blobs, manifests, tags."""

    def __init__(self, client: wire.Client):
        self.client, self.repo = client, client.ref.repo

    def _path(self, what: str, name: str) -> str:
        return f"/v2/{self.repo}/{what}/{name}"

    def check(self) -> None:
        r = self.client.request("GET", "/v2/")
        if r.status != 200:
            raise wire.RegistryError(
                f"{self.client.ref.registry}: /v2/ answered {wire.error_line(r)}; not an OCI registry?"
            )

    def has_blob(self, digest: str) -> bool:
        r = self.client.request("HEAD", self._path("blobs", digest), scope="pull,push")
        return r.status == 200

    def put_blob(self, digest: str, size: int, body) -> None:
        """Upload a blob (``body``: bytes, or a callable giving its pieces) unless the registry has it."""
        if self.has_blob(digest):
            return
        r = self.client.request(
            "POST",
            f"/v2/{self.repo}/blobs/uploads/",
            headers={"Content-Length": "0"},
            scope="pull,push",
        )
        where = r.headers.get("location")
        if r.status != 202 or not where:
            raise wire.RegistryError(
                f"{self.client.ref.registry}: starting an upload: {wire.error_line(r)}"
            )
        sep = "&" if "?" in where else "?"
        url = f"{where}{sep}digest={digest}"
        if url.startswith(("http://", "https://")):
            from urllib.parse import urlsplit

            u = urlsplit(url)
            if u.netloc != self.client.ref.registry:
                raise wire.RegistryError(
                    f"{self.client.ref.registry}: an upload location on another host ({u.netloc})"
                )
            url = u.path + (f"?{u.query}" if u.query else "")
        r = self.client.request(
            "PUT",
            url,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            body=body,
            size=size,
            scope="pull,push",
        )
        if r.status != 201:
            raise wire.RegistryError(
                f"{self.client.ref.registry}: uploading {digest[:19]}: {wire.error_line(r)}"
            )

    def put_manifest(self, reference: str, raw: bytes, media_type: str) -> dict:
        r = self.client.request(
            "PUT",
            self._path("manifests", reference),
            headers={"Content-Type": media_type, "Content-Length": str(len(raw))},
            body=raw,
            scope="pull,push",
        )
        if r.status != 201:
            raise wire.RegistryError(
                f"{self.client.ref.registry}: storing a manifest: {wire.error_line(r)}"
            )
        return r.headers

    def get_manifest(
        self, reference: str, expect: str | None = None, size: int | None = None
    ) -> bytes | None:
        """The bytes of a manifest or index (None: not there); Refused when ``expect`` (a digest) or ``size``
        does not hold for them."""
        r = self.client.request(
            "GET",
            self._path("manifests", reference),
            headers={"Accept": wire.ACCEPT},
            max_body=wire.MAX_MANIFEST,
        )
        if r.status == 404:
            return None
        if r.status != 200:
            raise wire.RegistryError(
                f"{self.client.ref.registry}: {reference}: {wire.error_line(r)}"
            )
        if expect is not None and sha256_digest(r.body) != expect:
            raise Refused(
                f"manifest {expect[:19]}…: the registry's bytes do not match its digest (tampered)"
            )
        if size is not None and len(r.body) != size:
            raise Refused(
                f"manifest {reference[:19]}…: {len(r.body)} bytes, its descriptor says {size}"
            )
        return r.body

    def get_small_blob(self, desc: dict, bound: int) -> bytes:
        r = self.client.request(
            "GET", self._path("blobs", desc["digest"]), max_body=min(bound, desc["size"])
        )
        if r.status != 200:
            raise wire.RegistryError(
                f"{self.client.ref.registry}: blob {desc['digest'][:19]}: {wire.error_line(r)}"
            )
        if len(r.body) != desc["size"] or sha256_digest(r.body) != desc["digest"]:
            raise Refused(
                f"blob {desc['digest'][:19]}…: the registry's bytes do not match its digest (tampered)"
            )
        return r.body

    def get_blob(self, desc: dict, sink: BlobFile, progress=None) -> None:
        """Stream a blob into ``sink`` (exactly its descriptor's size); Refused unless its sha256 matches."""
        r = self.client.request(
            "GET",
            self._path("blobs", desc["digest"]),
            sink=sink,
            size=desc["size"],
            progress=progress,
        )
        if r.status != 200:
            raise wire.RegistryError(
                f"{self.client.ref.registry}: blob {desc['digest'][:19]}: {wire.error_line(r)}"
            )
        if sink.size != desc["size"] or sink.digest != desc["digest"]:
            raise Refused(
                f"layer {desc['digest'][:19]}…: the registry's bytes do not match its digest (tampered)"
            )


# ---------------------------------------------------------------- push


@dataclass(frozen=True, kw_only=True)
class Pushed:
    manifest: str  # the bundle manifest's digest
    layer_bytes: int
    index_size: int  # bundles the tag's index lists after this push
    referrer: str  # where the signature referrer is listed: "referrers API" or the fallback tag
    requests: int


def push(
    reg: Registry,
    tag: str,
    layer: BlobFile,
    mbytes: bytes,
    notes: dict,
    sig: bytes | None,
    progress=None,
) -> Pushed:
    """Upload one bundle (``layer``: its tar; ``mbytes``: its manifest.json) and add it to ``tag``'s index."""
    cfg = descriptor(CONFIG_TYPE, sha256_digest(mbytes), len(mbytes))
    lay = descriptor(LAYER_TYPE, layer.digest, layer.size, annotations={A_TITLE: "bundle.tar"})
    reg.put_blob(cfg["digest"], cfg["size"], mbytes)
    reg.put_blob(lay["digest"], lay["size"], lambda: _counted(layer.chunks(), layer.size, progress))
    raw = bundle_manifest(cfg, lay, notes)
    mdigest = sha256_digest(raw)
    reg.put_manifest(mdigest, raw, wire.OCI_MANIFEST)
    entry = descriptor(
        wire.OCI_MANIFEST,
        mdigest,
        len(raw),
        artifactType=ARTIFACT_TYPE,
        annotations={k: v for k, v in notes.items() if k != A_SIGNATURE},
    )
    current = reg.get_manifest(tag)
    doc = None
    if current is not None:
        try:
            doc = jsonlimits.loads(current, max_bytes=wire.MAX_MANIFEST)
        except ValueError:
            raise Refused("the tag holds something that is not JSON; push to another tag") from None
        if isinstance(doc, dict) and doc.get("mediaType") == wire.OCI_MANIFEST:
            doc = _as_index(doc, current)
    index = plan_index(doc, entry)
    reg.put_manifest(
        tag, json.dumps(index, sort_keys=True, separators=(",", ":")).encode(), wire.OCI_INDEX
    )
    where = attach_signature(reg, entry, sig) if sig is not None else "none (unsigned)"
    return Pushed(
        manifest=mdigest,
        layer_bytes=layer.size,
        index_size=len(index["manifests"]),
        referrer=where,
        requests=reg.client.requests,
    )


def _counted(pieces, total: int, progress):
    """``pieces`` passed on, ``progress(done, total)`` after each (the upload's bar)."""
    done = 0
    for piece in pieces:
        yield piece
        done += len(piece)
        if progress is not None:
            progress(done, total)


def _as_index(doc: dict, raw: bytes) -> dict:
    """A tag that holds one bundle manifest (pushed by another tool, or by hand) as an index of it."""
    if doc.get("artifactType") != ARTIFACT_TYPE:
        raise Refused("the tag holds an image that is no jitwarden bundle; push to another tag")
    d = descriptor(
        wire.OCI_MANIFEST,
        sha256_digest(raw),
        len(raw),
        artifactType=ARTIFACT_TYPE,
        annotations={k: v for k, v in (doc.get("annotations") or {}).items() if k != A_SIGNATURE},
    )
    return {"schemaVersion": 2, "mediaType": wire.OCI_INDEX, "manifests": [d]}


def attach_signature(reg: Registry, subject: dict, sig: bytes) -> str:
    """Store the signature record as an OCI referrer of the bundle manifest ``subject``; where it is listed.

    A registry with the referrers API lists it by the ``subject`` (it answers ``OCI-Subject``); for one
    without (distribution 2.8), the fallback tag ``sha256-<hex>`` holds an index of the referrers.
    """
    reg.put_blob(sha256_digest(EMPTY), len(EMPTY), EMPTY)
    reg.put_blob(sha256_digest(sig), len(sig), sig)
    doc = {
        "schemaVersion": 2,
        "mediaType": wire.OCI_MANIFEST,
        "artifactType": SIGNATURE_TYPE,
        "config": descriptor(EMPTY_TYPE, sha256_digest(EMPTY), len(EMPTY)),
        "layers": [descriptor(SIGNATURE_LAYER, sha256_digest(sig), len(sig))],
        "subject": {k: subject[k] for k in ("mediaType", "digest", "size")},
        "annotations": {A_FINGERPRINT: subject["annotations"][A_FINGERPRINT]},
    }
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    heads = reg.put_manifest(sha256_digest(raw), raw, wire.OCI_MANIFEST)
    if heads.get("oci-subject") == subject["digest"]:
        return "referrers API"
    tag = subject["digest"].replace(":", "-")
    current = reg.get_manifest(tag)
    listed: list = []
    if current is not None:
        try:
            old = jsonlimits.loads(current, max_bytes=wire.MAX_MANIFEST)
            listed = [
                d
                for d in old.get("manifests", [])
                if isinstance(d, dict) and d.get("digest") != sha256_digest(raw)
            ]
        except (ValueError, AttributeError):
            listed = []
    mine = descriptor(wire.OCI_MANIFEST, sha256_digest(raw), len(raw), artifactType=SIGNATURE_TYPE)
    index = {"schemaVersion": 2, "mediaType": wire.OCI_INDEX, "manifests": [*listed, mine]}
    reg.put_manifest(
        tag, json.dumps(index, sort_keys=True, separators=(",", ":")).encode(), wire.OCI_INDEX
    )
    return f"tag {tag}"


# ---------------------------------------------------------------- pull


@dataclass(frozen=True, kw_only=True)
class Chosen:
    """The bundle of this node's fingerprint: its manifest's digest, its verified config, its layer."""

    manifest: str
    mbytes: bytes
    layout: Layout
    candidates: int
    created: float  # the signed manifest's ``created`` time


def resolve(reg: Registry, ref: wire.Ref, trusted, fp, differ) -> Chosen:
    """The bundle ``ref`` offers for fingerprint ``fp``, its config's signature checked against ``trusted``.

    NoMatch (nothing for this node: per candidate, ``differ(their fingerprint JSON, their digest)``'s
    words of what differs), Refused (a digest, size, layout or signature that does not hold).
    """
    reg.check()
    raw = reg.get_manifest(ref.reference, expect=ref.digest)
    if raw is None:
        raise wire.NotFound(f"{ref}: not found in the registry")
    try:
        doc = jsonlimits.loads(raw, max_bytes=wire.MAX_MANIFEST)
    except ValueError as exc:
        raise Refused(f"{ref}: the registry's answer is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise Refused(f"{ref}: the registry's answer is not a manifest")
    cands = candidates(doc, raw)
    pick = choose(cands, fp.digest)
    if pick is None:
        lines = [_candidate_line(reg, d, trusted, differ) for d in cands]
        raise NoMatch(
            f"{ref} holds no bundle for this node's fingerprint {fp.digest} ({len(cands)} candidate(s))",
            lines,
        )
    mraw = (
        raw
        if pick["digest"] == sha256_digest(raw)
        else reg.get_manifest(pick["digest"], expect=pick["digest"], size=pick["size"])
    )
    if mraw is None:
        raise Refused(
            f"manifest {pick['digest'][:19]}… is listed by the index but not in the registry"
        )
    lay = layout_of(mraw)
    mbytes = reg.get_small_blob(lay.config, bundle.MAX_MANIFEST)
    bundle.judge_signature(mbytes, lay.signature, trusted)
    m = bundle.parse_manifest(mbytes)
    if m.digest != fp.digest:
        raise Refused(
            f"the index says fingerprint {fp.digest}, the signed manifest says {m.digest}: not installed"
        )
    bound = bundle.layer_bound(m, len(mbytes))
    if lay.layer["size"] > bound:
        files = sum(len(e.files) for e in m.entries)
        raise Refused(
            f"the layer claims {lay.layer['size']} bytes; the signed manifest's {files} files make a "
            f"bundle of at most {bound}: not downloaded"
        )
    return Chosen(
        manifest=pick["digest"],
        mbytes=mbytes,
        layout=lay,
        candidates=len(cands),
        created=m.created,
    )


def _candidate_line(reg: Registry, d: dict, trusted, differ) -> str:
    """What differs between one candidate and this node, from its signed config; or why it cannot be told."""
    notes = d.get("annotations") or {}
    head = (
        f"{d['digest'][:19]}… ({notes.get(A_CAPABILITY, '?')}, driver {notes.get(A_DRIVER, '?')})"
    )
    try:
        raw = reg.get_manifest(d["digest"], expect=d["digest"], size=d["size"])
        if raw is None:
            return f"{head}: listed but not in the registry"
        lay = layout_of(raw)
        mbytes = reg.get_small_blob(lay.config, bundle.MAX_MANIFEST)
        bundle.judge_signature(mbytes, lay.signature, trusted)
        m = bundle.parse_manifest(mbytes)
    except (Refused, bundle.BundleRefused) as exc:
        return f"{head}: {exc}"
    return f"{head}: {differ(m.fingerprint, m.digest)}"


def download(reg: Registry, chosen: Chosen, sink: BlobFile, progress=None) -> None:
    """The chosen bundle's layer into ``sink``, its sha256 and size checked as it streams."""
    reg.get_blob(chosen.layout.layer, sink, progress)
