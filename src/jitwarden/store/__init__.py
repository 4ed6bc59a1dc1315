"""The thin disk layer and the cache store's primitives: fd-based file access that never follows links, locks, partitions, seals, quarantine.

See ARCHITECTURE.md for the layers and the rules between them.
"""
