"""What the running environment is: GPU (NVML), driver, ptxas, torch and Triton builds, cache locations, the fingerprint. Never initialises CUDA.

See ARCHITECTURE.md for the layers and the rules between them.
"""
