"""The LLaMA-style decoder the generation figures use computes what a decoder computes: decoding
with its KV cache gives the logits of running the whole sequence at once, and the cache matters."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "compiler_hooks", "torch"))
import tierpool_models  # noqa: E402


def test_decoding_with_the_cache_matches_the_whole_sequence():
    torch.manual_seed(1)
    model = tierpool_models.llama_decoder(all_logits=True).eval()
    tokens = torch.randint(0, 1024, (2, 12))
    with torch.no_grad():
        full, _ = model(tokens)
        logits, past = model(tokens[:, :8])
        steps = [logits]
        for i in range(8, 12):
            logits, past = model(tokens[:, i:i + 1], past)
            steps.append(logits)
        without_cache, _ = model(tokens[:, 11:])
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-4, atol=1e-4)
    # The last token alone, without the cache, is a different prediction.
    assert (without_cache[:, 0] - full[:, 11]).abs().max() > 1e-2
    layer0_key = past[0][0]
    assert layer0_key.shape == (2, 2, 12, 32)  # B x kv_heads x context x head_dim


def test_grouped_query_attention_shapes():
    model = tierpool_models.LlamaDecoder(layers=1, d_model=64, heads=8, kv_heads=2, ffn=96, vocab=50)
    logits, present = model(torch.randint(0, 50, (3, 5)))
    assert logits.shape == (3, 1, 50)  # the last position's, what sampling needs
    assert present[0][0].shape == (3, 2, 5, 8) and present[0][1].shape == (3, 2, 5, 8)
    with pytest.raises(ValueError):
        tierpool_models.LlamaDecoder(layers=1, d_model=64, heads=8, kv_heads=3, ffn=96, vocab=50)


def test_grouped_attention_matches_repeated_heads():
    """Query head h attends with key/value head h // (heads / kv_heads), as in LLaMA."""
    torch.manual_seed(2)
    attn = tierpool_models.Attention(d_model=64, heads=8, kv_heads=2).eval()
    x = torch.randn(2, 5, 64)
    angles = torch.randn(5, 8)
    cos, sin = angles.cos(), angles.sin()
    with torch.no_grad():
        out, (k, v) = attn(x, cos, sin, None)
        q = attn.wq(x).view(2, 5, 8, 8).transpose(1, 2)
        q = q * cos + tierpool_models.rotate_half(q) * sin
        k_rep, v_rep = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)
        scores = q @ k_rep.transpose(2, 3) / 8 ** 0.5
        scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
        ref = attn.wo((torch.softmax(scores, -1) @ v_rep).transpose(1, 2).reshape(2, 5, 64))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_the_corpus_decoder_with_its_cache_matches_the_whole_sequence():
    """The LLM corpus's decoder (repeat_interleave GQA, rotary from arange, triu mask, tied
    embedding): decoding token by token with its cache gives the whole sequence's logits."""
    torch.manual_seed(3)
    model = tierpool_models.CorpusLM(2, 64, 4, 2, 96, vocab=100)
    assert model.lm_head.weight is model.embed_tokens.weight
    tokens = torch.randint(0, 100, (2, 10))
    with torch.no_grad():
        full, _ = model.train()(tokens)  # training: every position's logits
        assert full.shape == (2, 10, 100)
        logits, past = model.eval()(tokens[:, :6])
        steps = [logits]
        for i in range(6, 10):
            logits, past = model(tokens[:, i:i + 1], past)
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full[:, 5:], rtol=1e-4, atol=1e-4)
    assert past[0][0].shape == (2, 2, 10, 16)  # B x kv_heads x context x head_dim
    for name, (layers, d, heads, kv, ffn) in tierpool_models.CORPUS_LLMS.items():
        assert d % heads == 0 and heads % kv == 0, name
