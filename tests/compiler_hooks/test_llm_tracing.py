"""LLM code as it is written, traced by `schedule from-torch` (compiler_hooks/torch): grouped-query
attention that repeats its key/value heads with repeat_interleave, RMSNorm, SwiGLU, a causal mask
from triu, and an embedding tied to the output projection."""
import argparse
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "compiler_hooks", "torch"))
import tierpool_static_shapes  # noqa: E402
import tierpool_torch_schedule  # noqa: E402


def test_whole_number_repeats_are_what_pytorch_computes():
    x = torch.randn(2, 3, 4, 5)
    calls = [lambda t: t.repeat_interleave(3, dim=d) for d in (0, 1, 2, 3, -1, -3)]
    calls += [lambda t: t.repeat_interleave(2), lambda t: torch.repeat_interleave(t, 2, 1),
              lambda t: t.repeat_interleave(1, dim=2), lambda t: t.repeat_interleave(0, dim=1),
              lambda t: t[0, 0, 0, 0].repeat_interleave(4)]
    want = [f(x) for f in calls]
    with tierpool_static_shapes.static_repeats():
        got = [f(x) for f in calls]
        # Counts given as a tensor, and the counts-only form, take PyTorch's own path.
        assert x.repeat_interleave(torch.tensor([1, 2, 0]), dim=1).shape == (2, 3, 4, 5)
        assert torch.repeat_interleave(torch.tensor([1, 2])).tolist() == [0, 1, 1]
    for w, g in zip(want, got):
        assert w.shape == g.shape and torch.equal(w, g)
    assert torch.Tensor.repeat_interleave is not None and x.repeat_interleave(2, 0).shape[0] == 4


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    """A decoder block as Llama-style code writes it; `repeat` picks how K/V heads are repeated."""

    def __init__(self, d, heads, kv_heads, repeat):
        super().__init__()
        self.h, self.kv, self.hd, self.repeat = heads, kv_heads, d // heads, repeat
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.up = nn.Linear(d, 8 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def heads(self, t):
        g = self.h // self.kv
        if self.repeat == "repeat_interleave":
            return t.repeat_interleave(g, dim=1)
        b, kv, n, hd = t.shape
        return t.unsqueeze(2).expand(b, kv, g, n, hd).reshape(b, kv * g, n, hd)

    def forward(self, x):
        b, n, d = x.shape
        y = self.n1(x)
        q = self.q(y).view(b, n, self.h, self.hd).transpose(1, 2)
        k = self.heads(self.k(y).view(b, n, self.kv, self.hd).transpose(1, 2))
        v = self.heads(self.v(y).view(b, n, self.kv, self.hd).transpose(1, 2))
        att = (q @ k.transpose(-1, -2)) / self.hd ** 0.5
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), 1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, n, d))
        gate, up = self.up(self.n2(x)).chunk(2, -1)
        return x + self.down(nn.functional.silu(gate) * up)


class TiedLM(nn.Module):
    def __init__(self, repeat, vocab=256, d=64, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, 4, 2, repeat) for _ in range(layers)])
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def gqa_repeat_interleave():
    return TiedLM("repeat_interleave")


def gqa_expand():
    return TiedLM("expand")


def trace(model, shape):
    a = tierpool_torch_schedule.build_parser().parse_args(
        ["--model", "test_llm_tracing:" + model, "--input", shape, "--optimizer", "adam",
         "--out", os.devnull])
    schedule, _, _, _ = tierpool_torch_schedule.trace(a)
    return schedule


def bytes_of(schedule, kind):
    return sum(int(t["size_bytes"]) for t in schedule["tensors"] if t["kind"] == kind)


@pytest.mark.parametrize("shape", ["2x16:int64", "1x48:int64"])
def test_grouped_query_attention_with_a_tied_embedding_traces_with_exact_weights(shape):
    """Before: DynamicOutputShapeException (aten.repeat_interleave.Tensor) under fake tensors, and,
    past it, the tied projection's real weight inside the fake trace."""
    got = trace("gqa_repeat_interleave", shape)
    model = gqa_repeat_interleave()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: once
    assert bytes_of(got, "WEIGHT") == weight_bytes
    assert bytes_of(got, "GRADIENT") == weight_bytes
    assert bytes_of(got, "OPTIMIZER_STATE") == 2 * weight_bytes  # Adam's two moments
    emb = next(t for t in got["tensors"] if t["name"] == "emb.weight")
    ops = [got["steps"][s]["op_type"] for s in emb["use_steps"]]
    assert "embedding" in ops and ops.count("mm") >= 2, ops  # looked up, and projects the output
    # The same as the repeat written out by hand: the same tensors and bytes of every kind.
    by_hand = trace("gqa_expand", shape)
    for kind in ("WEIGHT", "GRADIENT", "OPTIMIZER_STATE", "SAVED_ACTIVATION", "ACTIVATION"):
        assert bytes_of(got, kind) == bytes_of(by_hand, kind), kind
    assert isinstance(tierpool_torch_schedule.build_parser(), argparse.ArgumentParser)


def onnx_import(model, batch, seq, tmp_path):
    """`tierpool schedule from-onnx` of the model exported at batch x seq: the schedule's JSON."""
    tool = os.environ.get("TIERPOOL_CLI")
    if not tool:
        pytest.skip("TIERPOOL_CLI (the tierpool binary) not given")
    onnx_path, out = str(tmp_path / "model.onnx"), str(tmp_path / "model.pb")
    with torch.no_grad():
        torch.onnx.export(model.eval(), (torch.zeros(batch, seq, dtype=torch.int64),), onnx_path,
                          input_names=["tokens"], output_names=["logits"], opset_version=17)
    done = subprocess.run([tool, "schedule", "from-onnx", onnx_path, "-o", out, "--json",
                           out + ".json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with open(out + ".json") as f:
        return json.load(f)


def distinct_norms(model):
    """Untrained RMSNorm weights are all ones, and the exporter keeps one copy of equal
    initializers: trained weights are not equal, so make these differ as theirs would."""
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if name.endswith(".weight") and p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("repeat", ["repeat_interleave", "expand"])
@pytest.mark.parametrize("batch,seq", [(2, 16), (1, 48)])
def test_grouped_query_attention_exported_to_onnx_imports_with_exact_weights(repeat, batch, seq,
                                                                             tmp_path):
    """Before: repeat_interleave's export stopped the import on an Expand whose shape stayed
    unknown (its repeat counts go through Expand and Split of small integer tensors, which the
    folder did not evaluate), and the tied output projection, exported as the embedding's
    transpose, counted its bytes a second time."""
    model = distinct_norms(TiedLM(repeat))
    got = onnx_import(model, batch, seq, tmp_path)
    weights = [t for t in got["tensors"] if t.get("kind") == "WEIGHT"]
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: once
    assert sum(int(t["size_bytes"]) for t in weights) == weight_bytes
    emb = next(t for t in weights if t["name"] == "emb.weight")
    ops = {got["steps"][s]["op_type"] for s in emb["use_steps"]}
    assert ops == {"Gather", "MatMul"}, ops  # looked up, and projects the output
    logits = next(t for t in got["tensors"] if t.get("kind") == "OUTPUT")
    assert [int(d) for d in logits["shape"]] == [batch, seq, 256]


def corpus_lm_tiny():
    """The LLM corpus's decoder (tierpool_models.CorpusLM) at a test's size."""
    import tierpool_models
    return tierpool_models.llm_tiny()


def test_the_corpus_decoder_traces_for_training_and_decoding(tmp_path):
    """The LLM corpus as the planning corpus traces it: trained with exact weight bytes (the tied
    embedding once), and decoded with a KV cache that grows by each token."""
    got = trace("corpus_lm_tiny", "2x32:int64")
    model = corpus_lm_tiny()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert bytes_of(got, "WEIGHT") == weight_bytes
    assert bytes_of(got, "OPTIMIZER_STATE") == 2 * weight_bytes
    ops = {s["op_type"] for s in got["steps"]}
    assert {"embedding", "triu", "silu", "rsqrt"} <= ops, sorted(ops)
    tool = os.environ.get("TIERPOOL_CLI")
    if not tool:
        pytest.skip("TIERPOOL_CLI (the tierpool binary) not given")
    out = str(tmp_path / "decode.pb")
    done = subprocess.run([tool, "schedule", "from-torch", "--model",
                           "tierpool_models:llm_tiny", "--generate", "16:3",
                           "--decode-only", "--batch", "2", "-o", out, "--json", out + ".json"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr + done.stdout
    with open(out + ".json") as f:
        decode = json.load(f)
    assert bytes_of(decode, "WEIGHT") == weight_bytes
    kv = [t for t in decode["tensors"] if t.get("kind") == "KV_CACHE"]
    assert kv and max(int(t["size_bytes"]) for t in kv) > min(int(t["size_bytes"]) for t in kv)
