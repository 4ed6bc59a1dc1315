"""Run at start-up by every Python under ``jitwarden run``: guard what torch restores mid-run and JAX's persistent
cache (:mod:`jitwarden.runtime.flathooks`), then hand over to the ``sitecustomize`` this one shadows, if any.

:func:`jitwarden.runtime.torchhooks.install` is standard library only and never imports torch (it waits
for torch to import its loaders). Nothing here may raise: it runs before the program.
"""

import os
import sys


def _install() -> None:
    try:
        from jitwarden.runtime.torchhooks import install

        install()
    except Exception:
        pass
    try:
        from jitwarden.runtime.flathooks import install as install_load_hooks

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


_install()
_chain()
