"""Test helpers: real Triton caches, real guarded compiles, CLI runners, fleet servers."""
