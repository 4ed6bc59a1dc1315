"""What runs inside the workload: activate(), the guarded Triton cache manager, the sweep, first-use proofs, torch hooks, the vLLM plugin. Standard library only.

See ARCHITECTURE.md for the layers and the rules between them.
"""
