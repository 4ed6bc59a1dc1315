"""jitwarden: keeps GPU JIT kernel caches honest.

The package root imports only the standard library, so that ``import jitwarden``
and :func:`activate` are safe in any process, before or after torch.
"""

__version__ = "0.1.0"


def tool() -> dict:
    """This tool's identity, as every JSON document jitwarden prints names it: ``{"name", "version"}``."""
    return {"name": "jitwarden", "version": __version__}


def activate(**kwargs):
    """Partition and guard this process's kernel caches; never raises.

    See :func:`jitwarden.runtime.activation.activate` for the parameters.
    """
    from jitwarden.runtime.activation import activate as _activate

    return _activate(**kwargs)


__all__ = ["__version__", "activate"]
