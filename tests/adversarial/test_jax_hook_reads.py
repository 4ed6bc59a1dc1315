"""Issue 42: the JAX hook checks an entry before JAX could read it, and never writes through a link. Each case is
an attack another uid can plant in a team JAX dir; JAX's own ``LRUCache`` (the real class, CPU JAX) under
``GuardedJaxCache`` as the hook installs it. On the code before, JAX's ``get`` read the file itself first: a FIFO
blocked the workload for good and a link to ``/dev/zero`` read until memory ran out; ``put`` followed a dangling
link out of the cache."""

from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("jax")

from jitwarden.runtime import flatseal, say
from jitwarden.runtime.guards import jax as jax_guard
from jitwarden.store import seal

KEY = f"jit_f-{'a' * 64}"


def _guarded(d):
    from jax._src.lru_cache import LRUCache

    return jax_guard.GuardedJaxCache(LRUCache(str(d), max_size=-1), str(d))


def _within(fn, seconds=20.0):
    """``fn()``'s result, failing (never hanging the suite) when it has not returned in ``seconds``."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the read blocked"
    return out[0]


@pytest.fixture
def cache(tmp_path):
    d = tmp_path / "jaxc"
    d.mkdir(mode=0o700)
    return d


def test_a_fifo_at_a_key_is_refused_unread(cache, recwarn):
    os.mkfifo(cache / f"{KEY}-cache")
    assert _within(lambda: _guarded(cache).get(KEY)) is None  # a miss: JAX compiles
    assert not os.path.lexists(
        cache / f"{KEY}-cache"
    )  # quarantined, so JAX's put can write the real one
    assert any("a FIFO" in str(w.message) for w in recwarn)


def test_a_link_to_dev_zero_is_refused_unread(cache):
    os.symlink("/dev/zero", cache / f"{KEY}-cache")
    assert _within(lambda: _guarded(cache).get(KEY)) is None
    assert not os.path.lexists(cache / f"{KEY}-cache")


def test_a_dangling_link_at_a_key_is_never_written_through(cache, tmp_path):
    target = tmp_path / "victim-file"
    os.symlink(target, cache / f"{KEY}-cache")
    _guarded(cache).put(KEY, b"the executable")
    assert not target.exists()  # nothing created where the link pointed
    path = cache / f"{KEY}-cache"
    assert not path.is_symlink() and path.read_bytes() == b"the executable"
    assert f"{KEY}-cache" in flatseal.sealed_files(
        str(cache)
    )  # written by the hook, sealed as written


def test_a_seal_copied_from_another_dir_is_no_seal(cache, tmp_path):
    g = _guarded(cache)
    g.put(KEY, b"exe")
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / f"{KEY}-cache").write_bytes(b"exe")
    (other / ".jitwarden-seal.json").write_bytes((cache / ".jitwarden-seal.json").read_bytes())
    assert seal.read(str(cache), name=seal.flat_name(str(cache))) is not None
    assert (
        seal.read(str(other), name=seal.flat_name(str(other))) is None
    )  # the MAC binds the first dir's path


def test_a_symlinked_autotune_dir_is_not_followed(cache, tmp_path):
    outside = tmp_path / "outside"
    (outside / "v1").mkdir(parents=True)
    (outside / "v1" / "k.pb").write_bytes(b"\x0a\x00")
    os.symlink(outside, cache / flatseal.AUTOTUNE_DIR)
    assert flatseal.sealed_dirs("jax", str(cache)) == [(str(cache), [])]
    flatseal.check_root("jax", str(cache), None)
    assert not (
        outside / "v1" / ".jitwarden-seal.json"
    ).exists()  # nothing written outside the root


def test_a_dir_others_may_write_is_said_once_and_nothing_is_sealed_there(cache, recwarn):
    os.chmod(cache, 0o777)
    say._said.discard(f"untrusted:{cache}")
    g = _guarded(cache)
    g.put(KEY, b"exe")
    assert (cache / f"{KEY}-cache").read_bytes() == b"exe"  # JAX's own write goes through
    assert g.get(KEY) is None and g.get(KEY) is None  # proves nothing here: compiled each time
    assert (
        not (cache / ".jitwarden-seal.json").exists() and not (cache / ".jitwarden-lock").exists()
    )
    said = [str(w.message) for w in recwarn if "writable by everyone" in str(w.message)]
    assert len(said) == 1
