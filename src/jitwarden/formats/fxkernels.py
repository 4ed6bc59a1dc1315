"""The Triton kernels an Inductor FX graph (or AOTAutograd result) names, read from its pickle's bytes.

On an FX-graph-cache hit ``TritonBundler.read_and_emit`` writes each ``TritonKernelArtifacts`` of the
graph's bundle into the Triton cache as ``<kernel_hash>/``: the graph is only loadable with those
directories, so ``budget`` evicts them together. A ``kernel_hash`` is a Triton cache key, 52 characters
of base32 (``A-Z2-7``), pickled as a short string (``SHORT_BINUNICODE``, protocol 4 and 5, the
``\\x8c\\x34`` opcode and length) or a ``BINUNICODE`` (protocols 2 and 3). The pickle is never loaded:
the keys are found by their opcode, and a caller keeps only those that name an entry it has.
"""

from __future__ import annotations

import re

_KEY = re.compile(rb"(?:\x8c\x34|X\x34\x00\x00\x00)([A-Z2-7]{52})")


def kernel_keys(raw: bytes) -> frozenset[str]:
    """Every Triton cache key pickled as a string in ``raw`` (pure)."""
    return frozenset(m.group(1).decode("ascii") for m in _KEY.finditer(raw))
