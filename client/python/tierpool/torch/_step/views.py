"""Tensors over tierpool memory: a read-only tensor over a pinned view, a writable one over a
reservation's room, and the dense layout a tensor is stored in."""

import warnings

import torch

from ...client import Tier
from .. import _tensors


def over_view(mv, dtype, shape):
    """A tensor of ``dtype`` and ``shape`` over a host view's bytes, without a copy. The view
    (and its pin) lives as long as the tensor does. The memory is mapped read-only: the tensor
    is for reading (a write would fault)."""
    if mv.nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch warns of any read-only buffer
        flat = torch.frombuffer(mv, dtype=torch.uint8)
    return flat.view(dtype).view(shape)


def over_room(reservation, dtype, shape):
    """A writable tensor over a reservation's room; every tensor made from it must be gone
    before the reservation commits."""
    buf = reservation.buffer
    if buf.nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).view(shape)


def in_hbm(mv):
    """Whether a host view is of the object's hbm copy (else a copy below was the nearest the
    server could give: hbm had no room within the budget)."""
    return mv.obj.tier == Tier.HBM


def dense(t):
    """(the tensor in its dense memory order, contiguous; the permutation that restores it, or
    None). A tensor whose memory is not one dense block is copied contiguous."""
    if t.is_contiguous():
        return t, None
    order = _tensors.dense_permutation(t)
    if order is None:
        return t.contiguous(), None
    return t.permute(order), _tensors.inverse(order)


def nbytes(t):
    return t.numel() * t.element_size()


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")
