"""Moving one tensor's bytes through a tierpool client, whatever its layout and device."""

import torch


def dense_permutation(t):
    """The dimension order in which ``t`` is contiguous, or None when its memory is not a dense,
    non-overlapping block (then only a contiguous copy can be stored)."""
    if t.is_contiguous():
        return list(range(t.dim()))
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.size(d)))
    p = t.permute(order)
    return order if p.is_contiguous() else None


def host_copy_target(shape, dtype, device):
    """An empty tensor to read into: the tensor itself on CPU, pinned memory for a GPU."""
    if device.type == "cpu":
        return torch.empty(shape, dtype=dtype)
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def inverse(order):
    inv = [0] * len(order)
    for i, d in enumerate(order):
        inv[d] = i
    return inv
