"""On a GPU: a small real TorchInductor cache (Triton kernels with their triton_meta), as test data.

    TORCHINDUCTOR_CACHE_DIR=$OUT/ind python benchmarks/h200_capture_inductor.py
Writes two small compiled graphs (a pointwise+reduction block in fp16, a softmax); the
tests in tests/unit/adapters/test_inductor.py read the generated kernel sources and Triton trees.
"""

import torch


def block(x, w):
    h = torch.nn.functional.layer_norm(x, x.shape[-1:])
    return torch.nn.functional.gelu(h @ w) + x.sum(-1, keepdim=True)


def soft(x):
    return torch.softmax(x * 0.5, dim=-1)


x = torch.randn(64, 256, device="cuda", dtype=torch.half)
w = torch.randn(256, 256, device="cuda", dtype=torch.half)
a = torch.compile(block)(x, w)
b = torch.compile(soft)(x.float())
torch.cuda.synchronize()
print("captured", tuple(a.shape), tuple(b.shape), torch.cuda.get_device_capability())
