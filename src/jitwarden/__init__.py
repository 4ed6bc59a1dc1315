"""jitwarden: keeps GPU JIT kernel caches honest.

The package root imports only the standard library, so that ``import jitwarden``
and :func:`activate` are safe in any process, before or after torch.
"""

from __future__ import annotations

TYPE_CHECKING = (
    False  # as typing's, without importing it (about 2 ms of every start; type checkers know it)
)
if TYPE_CHECKING:  # annotations only: the runtime is imported when activate() is called
    from collections.abc import Iterable, MutableMapping

    from jitwarden.runtime.activation import Activation

__version__ = "0.1.0"


def tool() -> dict[str, str]:
    """This tool's identity, as every JSON document jitwarden prints names it: ``{"name", "version"}``."""
    return {"name": "jitwarden", "version": __version__}


def activate(
    *,
    env: MutableMapping[str, str] | None = None,
    roots: Iterable[str] | None = None,
    quiet: bool = False,
) -> Activation:
    """Partition and guard this process's kernel caches; never raises.

    :func:`jitwarden.runtime.activation.activate`, whose signature this is (a test keeps them one).
    """
    from jitwarden.runtime.activation import activate as _activate

    return _activate(env=env, roots=roots, quiet=quiet)


__all__ = ["__version__", "activate"]
