"""Run at start-up by every Python under ``jitwarden run``: make the ``jitwarden`` package importable (alone) in
a Python of another environment, guard what torch restores mid-run and JAX's persistent cache
(:mod:`jitwarden.runtime.guards`), then hand over to the ``sitecustomize`` this one shadows, if any.

:func:`jitwarden.runtime.guards.install_torch` is standard library only and never imports torch (it waits
for torch to import its loaders). Nothing here may raise: it runs before the program.
"""

import os
import sys

HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
"""The directory jitwarden itself is installed in (its site-packages, or a checkout's ``src``)."""


class _JitwardenOnly:
    """A last-resort finder for the ``jitwarden`` package alone, from :data:`HOME`: a Python of another
    environment (``jitwarden run -- /other/venv/bin/python``) can import the guard that
    ``TRITON_CACHE_MANAGER`` names, and nothing else of jitwarden's install (its dependencies stay out of the
    workload's way; jitwarden's runtime is standard library only). Last on ``sys.meta_path``: a jitwarden of
    the environment's own wins."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "jitwarden":
            return None
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(name, [HOME])


def _importable() -> None:
    try:
        sys.meta_path.append(_JitwardenOnly)
    except Exception:
        pass


def _install() -> None:
    try:
        from jitwarden.runtime.guards import install_torch

        install_torch()
    except Exception:
        pass
    try:
        from jitwarden.runtime.guards import install_load_hooks

        install_load_hooks()
    except Exception:
        pass


def _chain() -> None:
    """Run the next ``sitecustomize`` on sys.path (the one Python would have run without us)."""
    try:
        from importlib.machinery import PathFinder

        here = os.path.dirname(os.path.abspath(__file__))
        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        import importlib.util

        mod = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = mod
        spec.loader.exec_module(mod)
    except Exception:
        pass


_importable()
_install()
_chain()
