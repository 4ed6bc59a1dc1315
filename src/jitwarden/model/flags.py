"""On/off settings in environment variables: one word list for every ``JITWARDEN_*`` switch (pure, no imports).

Activation reads these in every Python process, so this module imports nothing. Case and
surrounding blanks do not matter; a word on neither list (or an unset variable) is
``None``, and each caller says what that means for its setting (``JITWARDEN_PROVE``: on
unless turned off; ``JITWARDEN_DISABLE``: off unless turned on).
"""

from __future__ import annotations

TRUE_WORDS = frozenset({"1", "true", "yes", "on", "y"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", "n"})


def parse_flag(value: str | None) -> bool | None:
    """True for a word of :data:`TRUE_WORDS`, False for one of :data:`FALSE_WORDS`, else None (unset included)."""
    if value is None:
        return None
    word = str(value).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None
