"""Readers of bytes: ELF cubins, PTX headers, JSON with limits, RESP. One reader per format; no disk access.

See ARCHITECTURE.md for the layers and the rules between them.
"""
