"""vLLM ``vllm.general_plugins`` entry point: jitwarden installed in vLLM's environment and vLLM is guarded.

vLLM calls :func:`register` in the API server, the engine core and every
worker, after importing torch and before any kernel compiles. It filters
plugins by entry-point name, so ``VLLM_PLUGINS`` must name ``jitwarden`` when it
is set (``VLLM_PLUGINS=jitwarden,other``); leaving ``jitwarden`` out disables it.

An exception in a plugin aborts vLLM's start-up, so this never raises.
"""

from __future__ import annotations

import logging
import os

from jitwarden.runtime.say import log

_DONE: dict[int, str] = {}


def _logger() -> logging.Logger:
    """vLLM's own logger when it is there (its handlers print), else ours."""
    try:
        from vllm.logger import init_logger

        return init_logger("vllm.jitwarden")
    except Exception:
        return log  # type: ignore[return-value]  # the lazy logger stands for it


def register() -> None:
    """Activate jitwarden in this vLLM process and log one line with the partition digest."""
    try:
        if os.getpid() in _DONE:
            return
        from jitwarden.runtime.activation import activate

        rec = activate()
        from jitwarden.runtime.guards import (
            install_torch,
        )  # torch is imported here: guard its kernel loaders now

        install_torch()
        from jitwarden.model.settings import is_guarded

        log = _logger()
        guard = (
            "on" if is_guarded(rec.cache_manager) else "off"
        )  # the remote manager is the guard plus a remote cache
        if rec.active:
            where = rec.partitions.get("TRITON_CACHE_DIR") or "unpartitioned"
            log.info(
                "jitwarden: kernel caches partitioned by fingerprint %s (Triton: %s; guard: %s)",
                rec.digest,
                where,
                guard,
            )
        else:
            log.warning(
                "jitwarden: caches not partitioned in this process (%s); Triton guard: %s",
                "; ".join(rec.skipped.values()) or "unknown",
                guard,
            )
        _DONE[os.getpid()] = rec.digest or ""
    except Exception as exc:
        try:
            log.warning("jitwarden: vLLM plugin skipped (%s: %s)", type(exc).__name__, exc)
        except Exception:
            pass
