"""Operations over caches: scan, typed plans with execute(), maintenance, the rebuild engine, canary, fleet bundles, metrics.

See ARCHITECTURE.md for the layers and the rules between them.
"""
