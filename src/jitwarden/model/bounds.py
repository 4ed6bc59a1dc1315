"""The most jitwarden reads of one cache file of each tool that keeps single-file entries, declared once
(ARCHITECTURE.md, "Reads bounded by kind"). Standard library only and nothing else: the load hooks read these on
a tool's first cache hit, where importing an adapter would cost the hit tens of milliseconds."""

JAX_ENTRY_MAX = 64 << 20
"""A JAX ``-cache`` file (compressed) read whole; past it only its head is judged (``adapters/jax``)."""

CUPY_ENTRY_MAX = 1 << 30
"""A CuPy kernel-cache file (its SHA-1 header and payload)."""

CUPY_HASH_LEN = 40
"""The hex SHA-1 of the payload that starts every CuPy kernel-cache file (``formats/cupyentry``)."""

NUMBA_FILE_MAX = 256 << 20
"""A numba-cuda index or data file (its pickles of kernels: KBs to MBs)."""
