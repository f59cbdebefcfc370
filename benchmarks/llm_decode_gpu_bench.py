#!/usr/bin/env python3
"""One decode step of Llama 3 8B's shape (tierpool_models.llama3_8b, bf16, batch 1, random
weights) from a KV cache of each context's length, on a GPU: eager PyTorch and replayed as a CUDA
graph, median of 10 (issue #16: what the LLM decode figures' step times are checked against).

--attention module: the module as it is traced (matmul, softmax, matmul per layer);
--attention sdpa: the same with those three replaced by one scaled_dot_product_attention call.

    python3 benchmarks/llm_decode_gpu_bench.py --attention module   # run from the repository root
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, "compiler_hooks/torch")
import tierpool_models  # noqa: E402


def sdpa_forward(self, x, cos, sin, past):
    """tierpool_models.Attention.forward with one scaled_dot_product_attention call (decode: one
    query token per sequence, so no mask)."""
    b, t, _ = x.shape
    q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
    k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
    v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
    q = q * cos + tierpool_models.rotate_half(q) * sin
    k = k * cos + tierpool_models.rotate_half(k) * sin
    if past is not None:
        k = torch.cat([past[0], k], dim=2)
        v = torch.cat([past[1], v], dim=2)
    present = (k, v)
    group = self.heads // self.kv_heads
    q = q.reshape(b, self.kv_heads, group * t, self.head_dim)
    out = F.scaled_dot_product_attention(q, k, v)
    out = out.view(b, self.heads, t, self.head_dim)
    return self.wo(out.transpose(1, 2).reshape(b, t, -1)), present


def median_ms(f, n=10):
    ts = []
    for _ in range(n):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        f()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attention", choices=["module", "sdpa"], default="module")
    ap.add_argument("--contexts", default="4096,32768,131072")
    a = ap.parse_args()
    if a.attention == "sdpa":
        tierpool_models.Attention.forward = sdpa_forward
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.time()
    with torch.device("cuda"):
        m = tierpool_models.llama3_8b().eval()
    torch.cuda.synchronize()
    print("built in %.1f s, %.2f GiB of weights" % (
        time.time() - t0, sum(p.numel() * p.element_size() for p in m.parameters()) / 2**30))
    with torch.no_grad():
        for ctx in (int(c) for c in a.contexts.split(",")):
            past = tuple((torch.randn(1, 8, ctx, 128, device="cuda"),
                          torch.randn(1, 8, ctx, 128, device="cuda")) for _ in range(32))
            tok = torch.randint(0, 128256, (1, 1), device="cuda", dtype=torch.int64)
            for _ in range(3):
                m(tok, past)
            torch.cuda.synchronize()
            eager = median_ms(lambda: m(tok, past))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    m(tok, past)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = m(tok, past)
            graph = median_ms(g.replay)
            print("context %6d: eager %.2f ms per token, CUDA graph %.2f ms" % (ctx, eager, graph),
                  flush=True)
            del g, out, past
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
