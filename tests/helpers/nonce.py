"""A workload whose FX graph compiles again in every start (issue 44): pytorch PR #194451's nonce, a custom
post-grad pass whose ``uuid()`` is new in every process, which torch hashes into every FX graph's key. With
``JW_NONCE`` unset the same function is a stable workload. ``JW_DEVICE`` picks the device (``cpu`` unless set:
the CPU test; ``cuda`` on the GPU). Used by tests/e2e/test_always_miss_inductor.py and
benchmarks/h200_coverage.py."""

WORKLOAD = r"""
import os, uuid
import torch

if os.environ.get("JW_NONCE"):
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Nonce(CustomGraphPass):
        def __call__(self, graph):
            return None

        def uuid(self):
            return uuid.uuid4().hex  # new in every start: the bug

    torch._inductor.config.post_grad_custom_post_pass = Nonce()

def f(x, y):
    return torch.relu(x @ y + 1).sum(dim=-1) * 2

dev = os.environ.get("JW_DEVICE", "cpu")
x = torch.ones(64, 64, device=dev); y = torch.ones(64, 64, device=dev)
out = torch.compile(f)(x, y)
assert torch.equal(out, f(x, y)), (out, f(x, y))
print("RESULT ok", flush=True)
"""
