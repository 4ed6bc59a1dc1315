"""store/fsutil: the old names of the disk layer, kept for callers written before the split (ARCHITECTURE.md)."""

from __future__ import annotations

import importlib

from jitwarden.store import fsutil

CONCERNS = ("paths", "reads", "atomic", "removal", "tempdirs", "entrylock")


def test_every_old_name_is_the_concern_modules_own_object():
    homes = {m: importlib.import_module(f"jitwarden.store.{m}") for m in CONCERNS}
    for name in fsutil.__all__:
        obj = getattr(fsutil, name)
        owners = [m for m, mod in homes.items() if getattr(mod, name, None) is obj]
        assert owners, f"fsutil.{name} is no concern module's {name}"


def test_one_name_per_job_in_the_concern_modules():
    """The exact synonyms of the old module (ensure_dir for make_dirs, private_tempdir for private_dir)
    are gone everywhere, the re-exports included."""
    for mod in [fsutil, *(importlib.import_module(f"jitwarden.store.{m}") for m in CONCERNS)]:
        assert not hasattr(mod, "ensure_dir") and not hasattr(mod, "private_tempdir")
