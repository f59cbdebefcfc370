"""Attention traced as PyTorch 2 runs it, on a PyTorch that decomposes it.

PyTorch 2's nn.MultiheadAttention hands attention to one fused kernel
(`scaled_dot_product_attention`) whenever the caller does not ask for the weights, as
nn.TransformerEncoderLayer and torchvision's ViT do. PyTorch 1.13 (Debian's) computes the same
thing as a batched matrix product, a softmax and a second product, and materialises the L x S
attention matrix of every head, saved for the backward pass. A schedule traced from that graph
has more ops and more saved bytes than the job a user runs on a current PyTorch: the 12-layer
transformer's 1.13 trace is timed 18% slower than its PyTorch 2 trace under the same profile.

`fused_attention()` is a context for tracing: on a PyTorch without
`scaled_dot_product_attention` it routes multi_head_attention_forward's weight-free path through
one op, `tierpool::_scaled_dot_product_efficient_attention`, with a backward op of its own, named
and shaped as PyTorch 2's memory-efficient kernel is (out and a float32 logsumexp forward; dq, dk,
dv backward; q, k, v, out and the logsumexp saved between them). Both ops compute real results
(on any device) so that calibration can run the traced graph; shape-only tracing uses their
meta kernels. Everything else (weights asked for, bias_k/bias_v, add_zero_attn, static keys,
unbatched inputs, a mask that needs a gradient) takes PyTorch's own path. On PyTorch 2 the
context changes nothing.
"""
import contextlib
import inspect
import math
import random

FORWARD = "_scaled_dot_product_efficient_attention"
BACKWARD = "_scaled_dot_product_efficient_attention_backward"

_library = None  # torch.library.Library, made once per process


def _wide(torch, x):
    """x in float32, or wider where it already is: the kernels accumulate as the fused ones do."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _dropout_mask(torch, shape, p, seed, device):
    """The same keep-mask, scaled, for a forward and its backward: the seed plays the part of
    the fused kernels' saved random state."""
    g = torch.Generator()
    g.manual_seed(seed)
    keep = (torch.rand(shape, generator=g, dtype=torch.float64) >= p).double() / (1.0 - p)
    return keep.to(device)


def _attention(torch, q, k, v, bias, dropout_p, seed):
    """softmax(q k^T / sqrt(d) + bias), dropped out, times v: the output (accumulated wide) and
    the logsumexp of the scores."""
    s = torch.matmul(_wide(torch, q), _wide(torch, k).transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + _wide(torch, bias)
    lse = torch.logsumexp(s, -1)
    a = torch.exp(s - lse.unsqueeze(-1))
    if dropout_p > 0:
        a = a * _dropout_mask(torch, a.shape, dropout_p, seed, a.device).to(a.dtype)
    return torch.matmul(a, _wide(torch, v)), lse


def _forward(q, k, v, bias, dropout_p, seed):
    import torch
    out, lse = _attention(torch, q, k, v, bias, dropout_p, seed)
    return out.to(q.dtype), lse


def _backward(grad_out, q, k, v, bias, out, lse, dropout_p, seed):
    """dq, dk, dv: autograd through the forward's own math, recomputed (as the fused backward
    recomputes the scores) with the same dropout mask."""
    import torch
    with torch.enable_grad():
        inputs = [x.detach().requires_grad_(True) for x in (q, k, v)]
        again, _ = _attention(torch, *inputs, bias, dropout_p, seed)
        grads = torch.autograd.grad(again, inputs, _wide(torch, grad_out))
    return tuple(g.to(x.dtype) for g, x in zip(grads, (q, k, v)))


def _forward_meta(q, k, v, bias, dropout_p, seed):
    import torch
    return (q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],)),
            q.new_empty(tuple(q.shape[:-1]), dtype=torch.float32))


def _backward_meta(grad_out, q, k, v, bias, out, lse, dropout_p, seed):
    import torch
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _register(torch):
    global _library
    if _library is not None:
        return
    lib = torch.library.Library("tierpool", "DEF")
    lib.define(FORWARD + "(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, "
               "float dropout_p, int seed) -> (Tensor, Tensor)")
    lib.define(BACKWARD + "(Tensor grad_out, Tensor query, Tensor key, Tensor value, "
               "Tensor? attn_bias, Tensor out, Tensor logsumexp, float dropout_p, int seed) "
               "-> (Tensor, Tensor, Tensor)")
    for key in ("CPU", "CUDA"):
        lib.impl(FORWARD, _forward, key)
        lib.impl(BACKWARD, _backward, key)
    lib.impl(FORWARD, _forward_meta, "Meta")
    lib.impl(BACKWARD, _backward_meta, "Meta")
    _library = lib


def _function(torch):
    ops = torch.ops.tierpool

    class FusedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, bias, dropout_p):
            seed = random.getrandbits(62) if dropout_p > 0 else 0
            out, lse = getattr(ops, FORWARD)(q, k, v, bias, dropout_p, seed)
            ctx.save_for_backward(q, k, v, bias, out, lse)
            ctx.dropout_p, ctx.seed = dropout_p, seed
            return out

        @staticmethod
        def backward(ctx, grad_out):
            q, k, v, bias, out, lse = ctx.saved_tensors
            gq, gk, gv = getattr(ops, BACKWARD)(grad_out.contiguous(), q, k, v, bias, out, lse,
                                                ctx.dropout_p, ctx.seed)
            return gq, gk, gv, None, None

    return FusedAttention


def _additive_mask(torch, attn_mask, key_padding_mask, bsz, heads, tgt_len, src_len, dtype):
    """MultiheadAttention's two masks as one additive bias broadcastable to B x H x L x S (True
    in a boolean mask means "may not attend", as MultiheadAttention takes it)."""
    def as_float(m):
        if m.dtype == torch.bool:
            return torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(m, float("-inf"))
        return m.to(dtype)

    bias = None
    if attn_mask is not None:
        m = as_float(attn_mask)
        bias = m.view(1, 1, tgt_len, src_len) if m.dim() == 2 else m.view(bsz, heads, tgt_len, src_len)
    if key_padding_mask is not None:
        m = as_float(key_padding_mask).view(bsz, 1, 1, src_len)
        bias = m if bias is None else bias + m
    return bias


def _mha_forward(original, torch, fused):
    F = torch.nn.functional
    signature = inspect.signature(original)

    def forward(*args, **kwargs):
        a = signature.bind(*args, **kwargs)
        a.apply_defaults()
        p = a.arguments
        query, key, num_heads = p["query"], p["key"], p["num_heads"]
        masks = (p["attn_mask"], p["key_padding_mask"])
        if (p["need_weights"] or query.dim() != 3 or p["bias_k"] is not None
                or p["bias_v"] is not None or p["add_zero_attn"] or p["static_k"] is not None
                or p["static_v"] is not None or query.shape[2] != p["embed_dim_to_check"]
                or p["embed_dim_to_check"] % num_heads
                or any(m is not None and m.requires_grad for m in masks)):
            # The fused op gives no gradient to a mask: a learned one keeps PyTorch's path.
            return original(*args, **kwargs)
        tgt_len, bsz, embed_dim = query.shape
        src_len = key.shape[0]
        head_dim = embed_dim // num_heads
        value, in_proj_bias = p["value"], p["in_proj_bias"]
        if p["use_separate_proj_weight"]:
            b_q = b_k = b_v = None
            if in_proj_bias is not None:
                b_q, b_k, b_v = in_proj_bias.chunk(3)
            q, k, v = F._in_projection(query, key, value, p["q_proj_weight"], p["k_proj_weight"],
                                       p["v_proj_weight"], b_q, b_k, b_v)
        else:
            q, k, v = F._in_projection_packed(query, key, value, p["in_proj_weight"], in_proj_bias)
        # L x B x E -> B x H x L x D, as PyTorch 2 hands them to scaled_dot_product_attention.
        q = q.view(tgt_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
        k = k.view(src_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
        v = v.view(src_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
        bias = _additive_mask(torch, *masks, bsz, num_heads, tgt_len, src_len, q.dtype)
        out = fused.apply(q, k, v, bias, p["dropout_p"] if p["training"] else 0.0)
        out = out.permute(2, 0, 1, 3).contiguous().view(tgt_len * bsz, embed_dim)
        out = F.linear(out, p["out_proj_weight"], p["out_proj_bias"])
        return out.view(tgt_len, bsz, embed_dim), None

    return forward


def needed(torch):
    """True where this PyTorch decomposes MultiheadAttention's attention (it has no
    scaled_dot_product_attention)."""
    return not hasattr(torch.nn.functional, "scaled_dot_product_attention")


@contextlib.contextmanager
def fused_attention(enabled=True):
    """Within it, MultiheadAttention's weight-free attention is one fused op (see the module's
    docstring); restores PyTorch's own function on leaving."""
    import torch
    if not enabled or not needed(torch):
        yield False
        return
    _register(torch)
    F = torch.nn.functional
    original = F.multi_head_attention_forward
    F.multi_head_attention_forward = _mha_forward(original, torch, _function(torch))
    try:
        yield True
    finally:
        F.multi_head_attention_forward = original
