"""Attention traced as PyTorch 2 runs it (compiler_hooks/torch/tierpool_attention.py): the fused
path computes what MultiheadAttention computes, forward and backward, and a traced transformer
has one attention op per layer each way and no attention matrix."""
import argparse
import os
import random
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "compiler_hooks", "torch"))
import tierpool_attention  # noqa: E402
import tierpool_torch_schedule  # noqa: E402

needs_decomposing_torch = pytest.mark.skipif(
    not tierpool_attention.needed(torch),
    reason="this PyTorch has scaled_dot_product_attention: MultiheadAttention is fused already")


def run_layer(layer, x, fused, **masks):
    """The layer's output and every gradient (input and parameters) of a fixed loss."""
    layer.zero_grad()
    x = x.detach().clone().requires_grad_(True)
    with tierpool_attention.fused_attention(fused) as took:
        assert took == fused
        out = layer(x, **masks)
    (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
    return [out.detach(), x.grad] + [p.grad.clone() for p in layer.parameters()]


@needs_decomposing_torch
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", ["none", "causal", "padding", "float", "both"])
def test_fused_attention_computes_what_multihead_attention_does(batch_first, mask):
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 48, dropout=0.0, batch_first=batch_first)
    b, s = 3, 7
    x = torch.randn((b, s, 32) if batch_first else (s, b, 32))
    masks = {}
    if mask in ("causal", "both"):
        masks["src_mask"] = torch.ones(s, s, dtype=torch.bool).triu(1)
    if mask in ("padding", "both"):
        pad = torch.zeros(b, s, dtype=torch.bool)
        pad[0, 5:] = True
        pad[2, 3:] = True
        masks["src_key_padding_mask"] = pad
    if mask == "float":
        masks["src_mask"] = torch.randn(s, s)
    want = run_layer(layer, x, False, **masks)
    got = run_layer(layer, x, True, **masks)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@needs_decomposing_torch
def test_fused_attention_backward_matches_its_forward_with_dropout(monkeypatch):
    """gradcheck in float64 with the dropout seed held: the backward keeps the forward's mask."""
    tierpool_attention._register(torch)
    fused = tierpool_attention._function(torch)
    monkeypatch.setattr(random, "getrandbits", lambda bits: 12345)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = torch.randn(1, 1, 5, 5, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda q, k, v: fused.apply(q, k, v, bias, 0.3), (q, k, v))
    # And dropout does drop: the output is not the dropout-free one.
    with_dropout = fused.apply(q, k, v, bias, 0.3)
    without = fused.apply(q, k, v, bias, 0.0)
    assert (with_dropout - without).abs().max() > 1e-3


def test_pytorchs_own_path_is_kept_where_weights_are_asked_for():
    torch.manual_seed(4)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    x = torch.randn(2, 5, 16)
    with tierpool_attention.fused_attention(True):
        out, weights = mha(x, x, x, need_weights=True)
    assert weights is not None and weights.shape == (2, 5, 5)
    assert torch.nn.functional.multi_head_attention_forward.__module__ == "torch.nn.functional"


@needs_decomposing_torch
def test_a_mask_that_learns_keeps_its_gradient():
    torch.manual_seed(5)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    x = torch.randn(2, 5, 16)
    mask = torch.randn(5, 5, requires_grad=True)
    with tierpool_attention.fused_attention(True):
        out, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    out.sum().backward()
    assert mask.grad is not None and mask.grad.abs().sum() > 0


def trace_stack(attention, shape="1x256x768"):
    a = tierpool_torch_schedule.build_parser().parse_args(
        ["--model", "tierpool_models:transformer_stack", "--input", shape, "--dtype",
         "bfloat16", "--out", os.devnull, "--attention", attention])
    schedule, _, _, _ = tierpool_torch_schedule.trace(a)
    return schedule


@needs_decomposing_torch
def test_a_traced_transformer_has_one_attention_op_per_layer_each_way():
    layers, b, heads, length, head_dim = 12, 1, 12, 256, 64
    fused, decomposed = trace_stack("fused"), trace_stack("decomposed")
    ops = [s["op_type"] for s in fused["steps"]]
    assert ops.count(tierpool_attention.FORWARD) == layers
    assert ops.count(tierpool_attention.BACKWARD) == layers
    assert "bmm" not in ops and "_softmax" not in ops
    forward = next(s for s in fused["steps"] if s["op_type"] == tierpool_attention.FORWARD)
    backward = next(s for s in fused["steps"] if s["op_type"] == tierpool_attention.BACKWARD)
    per = 2.0 * b * heads * length * length * head_dim
    assert forward["flops"] == 2 * per and backward["flops"] == 5 * per
    # No L x S matrix of any head is made; the logsumexp (B x H x L, float32) is saved instead.
    for t in fused["tensors"]:
        assert t["shape"][-2:] != [length, length], t["name"]
    lse = [t for t in fused["tensors"] if t["shape"] == [b, heads, length] and t["dtype"] == "float32"]
    assert len(lse) == layers and all(t["kind"] == "SAVED_ACTIVATION" for t in lse)
    # The decomposed trace has the matrices and more steps; parameters and gradients agree.
    assert len(decomposed["steps"]) > len(fused["steps"])
    assert any(t["shape"][-2:] == [length, length] for t in decomposed["tensors"])

    def bytes_of(schedule, kind):
        return sum(int(t["size_bytes"]) for t in schedule["tensors"] if t["kind"] == kind)

    for kind in ("WEIGHT", "GRADIENT", "OPTIMIZER_STATE"):
        assert bytes_of(fused, kind) == bytes_of(decomposed, kind) > 0
    # What the backward keeps changes by exactly this per layer: the bf16 probabilities go, the
    # attention's output (bf16) and its logsumexp (float32) are kept instead, as PyTorch 2's
    # memory-efficient kernel keeps them.
    per_layer = b * heads * length * length * 2 - b * length * heads * head_dim * 2 - b * heads * length * 4
    assert bytes_of(decomposed, "SAVED_ACTIVATION") - bytes_of(fused, "SAVED_ACTIVATION") == layers * per_layer


def test_the_tracer_refuses_an_unknown_attention_mode():
    with pytest.raises(SystemExit):
        tierpool_torch_schedule.build_parser().parse_args(
            ["--model", "m:c", "--out", "x", "--attention", "flash"])
    assert isinstance(tierpool_torch_schedule.build_parser(), argparse.ArgumentParser)


class ChunkThenView(torch.nn.Module):
    """Splits a projection in two and reshapes each half, as attention's q/k/v split does."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return a.view(-1, 2, 4) * b.view(-1, 2, 4).sigmoid()


def test_parts_of_a_split_alias_their_input_and_make_no_tensor():
    """torch 1.13 traces chunk/split with no value of their own; each part, and any view of a
    part, is the projection's memory, not a step that makes a tensor."""
    from tierpool_graph import VIEW_OPS
    a = tierpool_torch_schedule.build_parser().parse_args(
        ["--model", "test_fused_attention:ChunkThenView", "--input", "4x8", "--out", os.devnull])
    schedule, _, _, _ = tierpool_torch_schedule.trace(a)
    ops = [s["op_type"] for s in schedule["steps"]]
    assert not [op for op in ops if op in VIEW_OPS], ops
    # The forward makes the projection, the sigmoid and the product; no view is a step.
    forward = ops[:ops.index("sum")]
    assert forward == ["addmm", "sigmoid", "mul"], forward
