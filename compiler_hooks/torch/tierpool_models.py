"""Model factories for `tierpool schedule from-torch --model tierpool_models:NAME`: small ones for
tests, and LLaMA-style decoders for `--generate` (the shapes of Llama 3 1B and 8B, built only
from PyTorch layers)."""
import torch


def transformer_stack(layers=12, d_model=768, heads=12, ffn=3072):
    """A stack of torch.nn.TransformerEncoderLayer (BERT-base sized by default); input BxSxD."""
    return torch.nn.Sequential(*[
        torch.nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=0.0, batch_first=True)
        for _ in range(layers)])


def transformer_stack_d512():
    """The stack at 512 wide (8 heads, FFN 2048): the narrow one of the figures' three widths."""
    return transformer_stack(d_model=512, heads=8, ffn=2048)


def transformer_stack_d1024():
    """The stack at 1024 wide (16 heads, FFN 4096; BERT-large's width): the wide one."""
    return transformer_stack(d_model=1024, heads=16, ffn=4096)


def mlp(width=256, depth=4):
    """A small MLP for tests; input Bx width."""
    mods = []
    for _ in range(depth):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(torch.nn.Module):
    """Grouped-query attention with rotary position embeddings and a concatenated KV cache."""

    def __init__(self, d_model, heads, kv_heads):
        super().__init__()
        if d_model % heads or heads % kv_heads:
            raise ValueError("d_model must divide into heads, and heads into kv_heads")
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d_model // heads
        self.wq = torch.nn.Linear(d_model, heads * self.head_dim, bias=False)
        self.wk = torch.nn.Linear(d_model, kv_heads * self.head_dim, bias=False)
        self.wv = torch.nn.Linear(d_model, kv_heads * self.head_dim, bias=False)
        self.wo = torch.nn.Linear(heads * self.head_dim, d_model, bias=False)

    def forward(self, x, cos, sin, past):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        present = (k, v)
        s = k.shape[2]
        group = self.heads // self.kv_heads
        # The `group` query heads of each key/value head attend as one block of group x t rows
        # (as grouped-query decoding kernels do), so the cache is read, never copied per head.
        q = q.reshape(b, self.kv_heads, group * t, self.head_dim)
        scores = torch.matmul(q, k.transpose(2, 3)) * (self.head_dim ** -0.5)
        if t > 1:  # causal: query i (at position s - t + i) sees keys up to its own position
            mask = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(s - t)
            scores = scores.view(b, self.kv_heads, group, t, s).masked_fill(~mask, float("-inf"))
            scores = scores.view(b, self.kv_heads, group * t, s)
        out = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), v)
        out = out.view(b, self.heads, t, self.head_dim)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1)), present


class SwiGLU(torch.nn.Module):
    def __init__(self, d_model, ffn):
        super().__init__()
        self.w1 = torch.nn.Linear(d_model, ffn, bias=False)
        self.w3 = torch.nn.Linear(d_model, ffn, bias=False)
        self.w2 = torch.nn.Linear(ffn, d_model, bias=False)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class DecoderLayer(torch.nn.Module):
    def __init__(self, d_model, heads, kv_heads, ffn):
        super().__init__()
        self.attention_norm = RMSNorm(d_model)
        self.attention = Attention(d_model, heads, kv_heads)
        self.ffn_norm = RMSNorm(d_model)
        self.feed_forward = SwiGLU(d_model, ffn)

    def forward(self, x, cos, sin, past):
        h, present = self.attention(self.attention_norm(x), cos, sin, past)
        x = x + h
        return x + self.feed_forward(self.ffn_norm(x)), present


class LlamaDecoder(torch.nn.Module):
    """A LLaMA-style decoder-only model (RMSNorm, rotary embeddings, grouped-query attention,
    SwiGLU) of the form `tierpool schedule from-torch --generate` takes:

        logits, present = model(tokens, past)

    tokens: B x T int64; past: None (prefill) or, for each layer, a (key, value) pair of
    B x kv_heads x S x head_dim tensors; present: the same with S + T positions. logits are the
    last position's (B x 1 x vocab), what generation samples from; all_logits=True gives every
    position's."""

    def __init__(self, layers, d_model, heads, kv_heads, ffn, vocab, rope_theta=500000.0,
                 all_logits=False):
        super().__init__()
        self.all_logits = all_logits
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.layers = torch.nn.ModuleList(
            [DecoderLayer(d_model, heads, kv_heads, ffn) for _ in range(layers)])
        self.norm = RMSNorm(d_model)
        self.output = torch.nn.Linear(d_model, vocab, bias=False)
        head_dim = d_model // heads
        inv_freq = 1.0 / (rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, tokens, past=None):
        t = tokens.shape[1]
        start = 0 if past is None else past[0][0].shape[2]
        positions = torch.arange(start, start + t, device=tokens.device).float()
        freqs = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat([freqs, freqs], dim=-1)
        x = self.embed(tokens)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, cos, sin, None if past is None else past[i])
            presents.append(present)
        if not self.all_logits:
            x = x[:, -1:]
        return self.output(self.norm(x)), tuple(presents)


def llama_decoder(layers=2, d_model=256, heads=8, kv_heads=2, ffn=768, vocab=1024, all_logits=False):
    """A small LLaMA-style decoder for tests; see LlamaDecoder."""
    return LlamaDecoder(layers, d_model, heads, kv_heads, ffn, vocab, all_logits=all_logits)


def llama3_1b():
    """Llama 3.2 1B's shape: 16 layers, d_model 2048, 32 query and 8 key/value heads."""
    return LlamaDecoder(16, 2048, 32, 8, 8192, 128256)


def llama3_8b():
    """Llama 3.1 8B's shape: 32 layers, d_model 4096, 32 query and 8 key/value heads."""
    return LlamaDecoder(32, 4096, 32, 8, 14336, 128256)


# ---- The LLM corpus: decoders written the way current LLM code writes them (#75) ----
#
# Grouped-query attention that repeats its key/value heads with repeat_interleave, rotary
# embeddings computed in the graph from arange, RMSNorm, SwiGLU, a causal mask built with triu,
# and the embedding tied to the output projection. The same module is trained
# (`from-torch --input BxT:int64`: the loss is built from the logits) and decoded
# (`from-torch --generate`: `logits, present = model(tokens, past)`), in several sizes.


class CorpusAttention(torch.nn.Module):
    def __init__(self, d_model, heads, kv_heads, rope_theta):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d_model // heads
        self.rope_theta = rope_theta
        self.q_proj = torch.nn.Linear(d_model, d_model, bias=False)
        self.k_proj = torch.nn.Linear(d_model, kv_heads * self.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(d_model, kv_heads * self.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(d_model, d_model, bias=False)

    def rope(self, x, start):
        t, hd = x.shape[2], self.head_dim
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, hd, 2, device=x.device).float() / hd))
        positions = torch.arange(start, start + t, device=x.device).float()
        freqs = torch.outer(positions, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        return x * cos + rotate_half(x) * sin

    def forward(self, x, past):
        b, t, d = x.shape
        start = 0 if past is None else past[0].shape[2]
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rope(q, start), self.rope(k, start)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        present = (k, v)
        s = k.shape[2]
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) / (self.head_dim ** 0.5)
        if t > 1:
            mask = torch.triu(torch.ones(t, s, dtype=torch.bool, device=x.device), s - t + 1)
            scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.nn.functional.softmax(scores.float(), dim=-1).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, d)
        return self.o_proj(out), present


class CorpusBlock(torch.nn.Module):
    def __init__(self, d_model, heads, kv_heads, ffn, rope_theta):
        super().__init__()
        self.input_layernorm = RMSNorm(d_model)
        self.self_attn = CorpusAttention(d_model, heads, kv_heads, rope_theta)
        self.post_attention_layernorm = RMSNorm(d_model)
        self.gate_proj = torch.nn.Linear(d_model, ffn, bias=False)
        self.up_proj = torch.nn.Linear(d_model, ffn, bias=False)
        self.down_proj = torch.nn.Linear(ffn, d_model, bias=False)

    def forward(self, x, past):
        h, present = self.self_attn(self.input_layernorm(x), past)
        x = x + h
        y = self.post_attention_layernorm(x)
        x = x + self.down_proj(torch.nn.functional.silu(self.gate_proj(y)) * self.up_proj(y))
        return x, present


class CorpusLM(torch.nn.Module):
    """`logits, present = model(tokens, past=None)`: every position's logits (training) unless
    decoding (past given, or last_only), where only the last position's are made."""

    def __init__(self, layers, d_model, heads, kv_heads, ffn, vocab=32000, rope_theta=10000.0):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(vocab, d_model)
        self.layers = torch.nn.ModuleList(
            [CorpusBlock(d_model, heads, kv_heads, ffn, rope_theta) for _ in range(layers)])
        self.norm = RMSNorm(d_model)
        self.lm_head = torch.nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.embed_tokens.weight  # tied

    def forward(self, tokens, past=None):
        x = self.embed_tokens(tokens)
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, None if past is None else past[i])
            presents.append(present)
        if past is not None or not self.training:
            x = x[:, -1:]
        return self.lm_head(self.norm(x)), tuple(presents)


# Sizes of the LLM corpus (layers, d_model, query and key/value heads, SwiGLU width), named by
# their parameter count with the 32,000-token vocabulary tied: 100M, 300M, 0.8B and 2.9B.
CORPUS_LLMS = {
    "llm_100m": (12, 768, 12, 4, 2048),
    "llm_300m": (24, 1024, 16, 4, 2816),
    "llm_800m": (16, 2048, 32, 8, 5632),
    "llm_3b": (28, 3072, 24, 8, 8192),
}


def _corpus_llm(name):
    layers, d, heads, kv, ffn = CORPUS_LLMS[name]
    return CorpusLM(layers, d, heads, kv, ffn)


def llm_100m():
    return _corpus_llm("llm_100m")


def llm_300m():
    return _corpus_llm("llm_300m")


def llm_800m():
    return _corpus_llm("llm_800m")


def llm_3b():
    return _corpus_llm("llm_3b")


def llm_tiny():
    """The corpus decoder at a test's size (2 layers, d_model 64, 4 query and 2 key/value heads)."""
    return CorpusLM(2, 64, 4, 2, 96, vocab=256)
