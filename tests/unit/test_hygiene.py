"""Hygiene contracts the gates cannot see (issue 36; docs/development.md, "Gates").

The package ships its types (``py.typed`` in the wheel) and the public ``jitwarden.activate()`` is the
runtime's, signature for signature.
"""

from __future__ import annotations

import inspect
import os
import re

import jitwarden
from jitwarden.runtime import activation
from tests.helpers.paths import REPO, SRC


def test_the_package_ships_its_types():
    assert os.path.isfile(os.path.join(SRC, "jitwarden", "py.typed"))
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        text = f.read()
    # the wheel holds it (.ci/package checks the built wheel)
    assert re.search(r'\[tool\.setuptools\.package-data\]\njitwarden = \["py\.typed"\]', text)


def test_jitwarden_activate_has_the_runtimes_signature():
    public, runtime = inspect.signature(jitwarden.activate), inspect.signature(activation.activate)
    assert public == runtime
    assert [p.kind for p in public.parameters.values()] == [inspect.Parameter.KEYWORD_ONLY] * 3
