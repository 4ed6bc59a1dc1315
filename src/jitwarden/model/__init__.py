"""The vocabulary: entries, findings (code → severity, meaning, fix), errors, on-disk names, units. Pure; imports nothing of jitwarden's.

See ARCHITECTURE.md for the layers and the rules between them.
"""
