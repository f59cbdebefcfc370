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
import math
import random

FORWARD = "_scaled_dot_product_efficient_attention"
BACKWARD = "_scaled_dot_product_efficient_attention_backward"

_library = None  # torch.library.Library, made once per process


def _wide(torch, x):
    """x in float32, or wider where it already is: the kernels accumulate as the fused ones do."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _scores(torch, q, k, bias):
    s = torch.matmul(_wide(torch, q), _wide(torch, k).transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return s if bias is None else s + _wide(torch, bias)


def _dropout_mask(torch, shape, p, seed, device):
    """The same keep-mask, scaled, for a forward and its backward: the seed plays the part of
    the fused kernels' saved random state."""
    g = torch.Generator()
    g.manual_seed(seed)
    keep = (torch.rand(shape, generator=g, dtype=torch.float64) >= p).double() / (1.0 - p)
    return keep.to(device)


def _forward(q, k, v, bias, dropout_p, seed):
    import torch
    s = _scores(torch, q, k, bias)
    lse = torch.logsumexp(s, -1)
    a = torch.exp(s - lse.unsqueeze(-1))
    if dropout_p > 0:
        a = a * _dropout_mask(torch, a.shape, dropout_p, seed, a.device).to(a.dtype)
    return torch.matmul(a, _wide(torch, v)).to(q.dtype), lse


def _backward(grad_out, q, k, v, bias, out, lse, dropout_p, seed):
    import torch
    a = torch.exp(_scores(torch, q, k, bias) - lse.unsqueeze(-1))  # softmax, from the saved lse
    g, vf = _wide(torch, grad_out), _wide(torch, v)
    ga = torch.matmul(g, vf.transpose(-2, -1))
    a_kept = a
    if dropout_p > 0:
        mask = _dropout_mask(torch, a.shape, dropout_p, seed, a.device).to(a.dtype)
        a_kept, ga = a * mask, ga * mask
    gv = torch.matmul(a_kept.transpose(-2, -1), g)
    gs = a * (ga - (ga * a).sum(-1, keepdim=True)) / math.sqrt(q.shape[-1])
    gq = torch.matmul(gs, _wide(torch, k))
    gk = torch.matmul(gs.transpose(-2, -1), _wide(torch, q))
    return gq.to(q.dtype), gk.to(k.dtype), gv.to(v.dtype)


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

    def forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                **more):
        args = (query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias)
        kwargs = dict(training=training, key_padding_mask=key_padding_mask,
                      need_weights=need_weights, attn_mask=attn_mask,
                      use_separate_proj_weight=use_separate_proj_weight,
                      q_proj_weight=q_proj_weight, k_proj_weight=k_proj_weight,
                      v_proj_weight=v_proj_weight, static_k=static_k, static_v=static_v,
                      average_attn_weights=average_attn_weights, **more)
        if (need_weights or more or query.dim() != 3 or bias_k is not None or bias_v is not None
                or add_zero_attn or static_k is not None or static_v is not None
                or query.shape[2] != embed_dim_to_check or embed_dim_to_check % num_heads
                or any(m is not None and m.requires_grad for m in (attn_mask, key_padding_mask))):
            # The fused op gives no gradient to a mask: a learned one keeps PyTorch's path.
            return original(*args, **kwargs)
        tgt_len, bsz, embed_dim = query.shape
        src_len = key.shape[0]
        head_dim = embed_dim // num_heads
        if use_separate_proj_weight:
            b_q = b_k = b_v = None
            if in_proj_bias is not None:
                b_q, b_k, b_v = in_proj_bias.chunk(3)
            q, k, v = F._in_projection(query, key, value, q_proj_weight, k_proj_weight,
                                       v_proj_weight, b_q, b_k, b_v)
        else:
            q, k, v = F._in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
        # L x B x E -> B x H x L x D, as PyTorch 2 hands them to scaled_dot_product_attention.
        q = q.view(tgt_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
        k = k.view(src_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
        v = v.view(src_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
        bias = _additive_mask(torch, attn_mask, key_padding_mask, bsz, num_heads, tgt_len,
                              src_len, q.dtype)
        out = fused.apply(q, k, v, bias, dropout_p if training else 0.0)
        out = out.permute(2, 0, 1, 3).contiguous().view(tgt_len * bsz, embed_dim)
        out = F.linear(out, out_proj_weight, out_proj_bias)
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
