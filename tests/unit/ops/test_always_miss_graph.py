"""Always-miss of graphs (issue 44): which input of an FX graph's key changed, from the lines torch logs for
the key as the record keeps them (pure: no torch)."""

from __future__ import annotations

import json

from jitwarden.ops import always_miss, workload
from jitwarden.runtime import record


def _lines(nonce: str, graph: str = "g1", mode: str = "None") -> list[str]:
    return [
        f"[{graph}hash] gm: <lambda>()\n    def forward(self, x): return x + 1",
        "[in0hash] example_inputs[0]: TensorMetadata(dtype=torch.float32, shape=torch.Size([8]))",
        f"[h{nonce[-8:]}] post_grad_custom_post_pass: {nonce}",
        f"[{mode}h] fx_kwargs[cudagraphs]: {mode}",
        "[tv] torch_version: \x8f\x10binary",
        "no such shape",
    ]


def _events(starts: list[list[str]], kind: str = "inductor") -> tuple:
    out = []
    for i, lines in enumerate(starts):
        key = f"f{i}"
        parsed = record.parse_key_lines(lines)
        out.append(
            workload.Event(
                start=f"s{i}",
                time=float(i),
                kind=kind,
                key=key,
                name="graph 1",
                event="compile",
                seconds=1.5,
                inputs=parsed,
            )
        )
    return tuple(out)


def test_parse_keeps_hashes_short_printable_values_and_skips_other_lines():
    got = record.parse_key_lines(_lines("abcdef0123456789"))
    assert set(got["h"]) == {
        "gm",
        "example_inputs",
        "example_inputs[0]",
        "post_grad_custom_post_pass",
        "fx_kwargs",
        "fx_kwargs[cudagraphs]",
        "torch_version",
    }
    assert got["v"]["post_grad_custom_post_pass"] == "abcdef0123456789"
    assert "torch_version" not in got["v"]  # not printable
    assert "gm" not in got["v"]  # the graph's code is long: its hash alone
    assert record.parse_key_lines(None) == {"h": {}, "v": {}}
    big = [f"[h{i}] inductor_config[k{i}]: v" for i in range(record.MAX_ITEMS + 1)]
    cut = record.parse_key_lines(big)
    assert set(cut["h"]) == {"inductor_config"} and cut["more"] == str(record.MAX_ITEMS + 1)
    other = [
        f"[h{i}] inductor_config[k{i}]: {'x' if i else 'y'}" for i in range(record.MAX_ITEMS + 1)
    ]
    assert record.parse_key_lines(other)["h"] == cut["h"]  # the same item hashes: the same digest
    changed = [f"[g{i}] inductor_config[k{i}]: v" for i in range(record.MAX_ITEMS + 1)]
    assert record.parse_key_lines(changed)["h"] != cut["h"]


def test_a_nonce_in_every_start_is_a_random_value_with_its_fix():
    w = workload.Workload(
        name="w", digest="d", events=_events([_lines(f"{n:016x}") for n in (1, 2, 3)])
    )
    (m,) = always_miss.check(w, ())
    assert m.cause == "random"
    assert m.line().startswith(
        "inductor: graph 1 compiled 3 times in 3 starts: its key holds a value that is new in every "
        "start: only post_grad_custom_post_pass differs ("
    )
    assert "(the same graph, the same inputs)" in m.line()
    assert "uuid()" in m.fix


def test_a_setting_that_comes_back_is_a_setting_not_a_random_value():
    starts = [_lines("same0000", mode=m) for m in ("True", "False", "True")]
    w = workload.Workload(name="w", digest="d", events=_events(starts))
    (m,) = always_miss.check(w, ())
    assert m.cause == "setting"
    assert "only fx_kwargs[cudagraphs] differs (True, False)" in m.why  # its item, not fx_kwargs
    assert m.fix == "call torch.compile with the same options in every start"


def test_a_graph_new_in_every_start_is_named_the_graph():
    starts = [_lines("same0000", graph=f"g{n}") for n in range(3)]
    (m,) = always_miss.check(workload.Workload(name="w", digest="d", events=_events(starts)), ())
    assert m.cause == "graph"
    assert "the graph itself is new in every start" in m.why and "only gm differs" in m.why


def test_no_inputs_recorded_is_unknown_never_a_guess():
    ev = tuple(
        workload.Event(
            start=f"s{i}", time=i, kind="inductor", key=f"f{i}", name="graph 1", event="compile"
        )
        for i in range(2)
    )
    (m,) = always_miss.check(workload.Workload(name="w", digest="d", events=ev), ())
    assert m.cause == "unknown" and "were not recorded" in m.why


def test_the_same_graph_hit_in_a_later_start_is_no_always_miss():
    ev = _events([_lines("n1")]) + (
        workload.Event(
            start="s1", time=2.0, kind="inductor", key="f0", name="graph 1", event="hit"
        ),
    )
    assert always_miss.check(workload.Workload(name="w", digest="d", events=ev), ()) == []


def test_a_forged_inputs_field_is_no_inputs():
    for forged in ({"h": {"a": 1}}, {"h": "x"}, {"h": {"a": "b"}, "v": ["x"]}, [1], "s"):
        line = json.dumps(
            {"start": "s", "kind": "inductor", "key": "k", "event": "compile", "inputs": forged}
        ).encode()
        (e,), skipped = workload.parse(line)
        assert e.inputs is None and skipped == 0
    line = json.dumps(
        {
            "start": "s",
            "kind": "inductor",
            "key": "k",
            "event": "compile",
            "inputs": {"h": {"a": "1"}, "v": {"a": "x", "b": "y"}},
        }
    ).encode()
    (e,), _ = workload.parse(line)
    assert e.inputs == {"h": {"a": "1"}, "v": {"a": "x"}}  # a value of no hashed input is dropped
