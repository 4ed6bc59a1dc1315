"""The hostile-environment matrix of issue 21 (the generator, the world and the shapes: tests/adversarial/matrix.py).

Every case: an exit in {0, 1, 2, 4} (a refusal, 2, in one error line) and no traceback (a workload that serves
kernels: exit 0, unless stock Triton fails identically in its own code with no jitwarden frame), no hang, nothing outside the world changed, no tampered cubin served. CI runs a
seeded sample that has every entry point, shape, path and path argument; ``JW_MATRIX=full`` runs the
whole product, ``JW_MATRIX=<n>`` at least n cases per entry point, ``JW_MATRIX_SEED`` another sample.
``JW_MATRIX_ONLY=<entry,...>`` only those entry points; ``JW_MATRIX_REPORT=<file>`` appends one JSON line per case. The summary line is printed at the end.
"""

from __future__ import annotations

import os

import pytest

from tests.adversarial import matrix as mx
from tests.helpers.fleet import Server, server_binary

CASES = mx.selected_cases()


@pytest.fixture(scope="module")
def remote_url(tmp_path_factory):
    binary = server_binary()
    if binary is None:
        why = "no redis-server or valkey-server on PATH (apt-get install redis-server; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    s = Server(binary, str(tmp_path_factory.mktemp("matrix-redis")))
    yield s.url
    s.stop()


@pytest.fixture(scope="module")
def registry_host(tmp_path_factory):
    from tests.helpers import registry as reghelp

    exe = reghelp.binary()
    if (
        exe is None
    ):  # push and pull then meet a closed port (exit 2): the other entry points still run
        if os.environ.get("CI"):
            pytest.fail("no docker-registry on PATH (.ci/run installs it)")
        yield None
        return
    r = reghelp.Registry(exe, str(tmp_path_factory.mktemp("matrix-registry")))
    yield r.host
    r.stop()


@pytest.fixture(scope="module")
def world(tmp_path_factory, remote_url, registry_host):
    return mx.build_world(str(tmp_path_factory.mktemp("matrix")), remote_url, registry_host)


def test_generated_cases_cover_every_verb_and_layout_name():
    """A new verb, sub-verb or layout name is in the matrix (and in the CI sample) without anyone adding it."""
    verbs = {" ".join(v) for v in mx.parser_verbs()}
    assert {
        "quarantine ls",
        "quarantine restore",
        "quarantine empty",
        "import",
        "push",
        "pull",
        "metrics",
        "run",
    } <= verbs
    every = mx.all_cases()
    sampled = mx.sample(every, 2, 0)
    for cases in (every, sampled):
        assert verbs | {"activate()", "guard", "remote-manager"} <= {c.entry.name for c in cases}
        assert set(mx.SHAPES) <= {c.shape for c in cases}
        labels = {c.target.label for c in cases}
        for const, name in mx.layout_names().items():
            assert any(label.endswith("/" + name) for label in labels), (
                f"layout name {const}={name!r} not in the matrix"
            )
        assert {
            "$TRITON_CACHE_DIR",
            "$TORCHINDUCTOR_CACHE_DIR",
            "$VLLM_CACHE_ROOT",
            "$JITWARDEN_HOME",
        } <= labels
        for e in mx.entry_points():
            for a in e.path_args:
                assert (e.name, f"arg {a.option or a.dest}") in {
                    (c.entry.name, c.target.label) for c in cases
                }


def test_the_pinned_cases_of_issue_21_exist():
    """A renamed path or verb must not drop a pinned case silently."""
    assert set(mx.PINNED) <= {c.id for c in mx.all_cases()}


def test_sample_is_bounded():
    """The CI sample stays a small fraction of the product (the full run is JW_MATRIX=full)."""
    assert len(mx.sample(mx.all_cases(), 2, 0)) <= max(150, len(mx.entry_points()) * 6)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_case(world, case, tmp_path_factory):
    rec = mx.run_case(world, case, str(tmp_path_factory.getbasetemp()))
    mx.record(rec)
    assert not rec["problems"], (
        f"{case.id}: {'; '.join(rec['problems'])} (exit {rec['rc']}) {rec['stderr'][-400:]}"
    )


def test_a_new_layout_name_and_a_new_verb_join_the_matrix_by_themselves(monkeypatch):
    """Nobody has to remember: a name added to model/layout.py lands at every level, a verb added to the
    parser becomes an entry point with its path arguments."""
    from jitwarden.cli import main as cli_main
    from jitwarden.model import layout

    monkeypatch.setattr(layout, "NEW_STATE_FILE", ".jitwarden-new.json", raising=False)
    real = cli_main.build_parser

    def with_new_verb(argv=None):
        parser = real(argv)
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        sub.add_parser("frobnicate").add_argument("--out", metavar="FILE")
        return parser

    monkeypatch.setattr(cli_main, "build_parser", with_new_verb)
    cases = mx.all_cases()
    labels = {c.target.label for c in cases}
    assert {
        "root/.jitwarden-new.json",
        "partition/.jitwarden-new.json",
        "entry/.jitwarden-new.json",
    } <= labels
    assert {c.shape for c in cases if c.target.label == "entry/.jitwarden-new.json"} == set(
        mx.SHAPES
    )
    new = {(c.target.label, c.shape) for c in cases if c.entry.name == "frobnicate"}
    assert ("arg --out", "fifo") in new and ("entry/.jitwarden-seal.json", "deep-json") in new
    assert "frobnicate" in {c.entry.name for c in mx.sample(cases, 2, 0)}
