#!/usr/bin/env python3
"""One decode step of Llama 3 8B's shape (tierpool_models.llama3_8b, bf16, batch 1, random
weights) from a KV cache of each context's length, on a GPU: eager PyTorch and replayed as a CUDA
graph, median of 10 (issue #16: what the LLM decode figures' step times are checked against).

--attention module: the module as it is traced (matmul, softmax, matmul per layer; each layer's
    cache grown by torch.cat, a copy of the whole cache every step);
--attention sdpa: the same with those three replaced by one scaled_dot_product_attention call;
--attention static-sdpa: a preallocated cache of the context's length that each step writes its
    token's key and value into in place (what a serving engine does, and what the traced
    schedule times: the append, not a copy), attended with scaled_dot_product_attention;
--attention static-split: the same cache attended in slices of --slice positions (split-KV, as
    FlashDecoding does: each slice's scores, softmax sums and values in one batched matmul over
    all slices, then the slices' partial results combined), so that the whole GPU reads the
    cache at once even with one query token.

--profile also prints the step's kernels by total time (PyTorch's profiler, eager) and
--count-ops the aten ops one eager step dispatches, for the host's time per op.

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


def rotated_qkv(self, x, cos, sin):
    """The step's queries, keys and values (B x heads x T x head_dim, the rotary embedding
    applied), as tierpool_models.Attention.forward makes them."""
    b, t, _ = x.shape
    q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
    k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
    v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
    q = q * cos + tierpool_models.rotate_half(q) * sin
    k = k * cos + tierpool_models.rotate_half(k) * sin
    return q, k, v


def attend_grouped(self, q, k, v, attend):
    """The output projection of `attend` over the keys and values, the `group` query heads of
    each key/value head taken as one block of rows (as the module does)."""
    b, _, t, _ = q.shape
    q = q.reshape(b, self.kv_heads, (self.heads // self.kv_heads) * t, self.head_dim)
    out = attend(q, k, v).view(b, self.heads, t, self.head_dim)
    return self.wo(out.transpose(1, 2).reshape(b, t, -1))


def sdpa_forward(self, x, cos, sin, past):
    """tierpool_models.Attention.forward with one scaled_dot_product_attention call (decode: one
    query token per sequence, so no mask)."""
    q, k, v = rotated_qkv(self, x, cos, sin)
    if past is not None:
        k = torch.cat([past[0], k], dim=2)
        v = torch.cat([past[1], v], dim=2)
    return attend_grouped(self, q, k, v, F.scaled_dot_product_attention), (k, v)


def static_forward(attend):
    """tierpool_models.Attention.forward over a preallocated cache: `past` is the layer's
    (key, value) buffers of B x kv_heads x CAPACITY x head_dim; the step's token goes into the
    last slot(s) in place, and the buffers are returned as `present` (the same storage)."""

    def forward(self, x, cos, sin, past):
        q, k, v = rotated_qkv(self, x, cos, sin)
        cache_k, cache_v = past
        pos = cache_k.shape[2] - k.shape[2]
        cache_k[:, :, pos:].copy_(k)
        cache_v[:, :, pos:].copy_(v)
        return attend_grouped(self, q, cache_k, cache_v, attend), past

    return forward


def split_kv_attention(slice_len):
    """Attention of a few query rows over a long cache, in slices of `slice_len` positions: each
    slice's scores, max, exponentials and weighted values are batched matmuls and reductions
    over every slice at once, then the slices are combined by their maxima (the log-sum-exp
    rescaling FlashDecoding uses)."""

    def attend(q, k, v):
        b, h, g, d = q.shape
        s = k.shape[2]
        n = s // slice_len
        if n * slice_len != s:
            raise ValueError("the cache's length must be a multiple of --slice")
        ks = k.view(b, h, n, slice_len, d)
        vs = v.view(b, h, n, slice_len, d)
        scores = torch.matmul(q.unsqueeze(2), ks.transpose(-1, -2)).float() * (d ** -0.5)
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - m)
        total = p.sum(-1, keepdim=True)
        part = torch.matmul(p.to(q.dtype), vs).float()
        top = m.amax(2, keepdim=True)
        w = torch.exp(m - top)
        return ((part * w).sum(2) / (total * w).sum(2)).to(q.dtype)

    return attend


def count_ops(f):
    """aten ops one call of f dispatches (what the host issues one by one in eager mode)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        f()
    return Count.n


def print_profile(f, label):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        f()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    time_of = lambda e: getattr(e, "self_device_time_total", None) or e.self_cuda_time_total
    total = sum(time_of(e) for e in events)
    print("%s: kernels %.2f ms in all, %d launches" % (
        label, total / 1e3, sum(e.count for e in events)))
    for e in sorted(events, key=time_of, reverse=True)[:10]:
        print("  %8.3f ms %5d x  %s" % (time_of(e) / 1e3, e.count, e.key[:110]))


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
    ap.add_argument("--attention", choices=["module", "sdpa", "static-sdpa", "static-split"],
                    default="module")
    ap.add_argument("--contexts", default="4096,32768,131072")
    ap.add_argument("--slice", type=int, default=1024, help="static-split's slice, in positions")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--count-ops", action="store_true")
    a = ap.parse_args()
    if a.attention == "sdpa":
        tierpool_models.Attention.forward = sdpa_forward
    elif a.attention == "static-sdpa":
        tierpool_models.Attention.forward = static_forward(F.scaled_dot_product_attention)
    elif a.attention == "static-split":
        tierpool_models.Attention.forward = static_forward(split_kv_attention(a.slice))
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
            try:
                if a.count_ops:
                    ops = count_ops(lambda: m(tok, past))
                    print("context %6d: %d aten ops per step, %.1f us of eager step per op" % (
                        ctx, ops, 1e3 * eager / ops), flush=True)
                if a.profile:
                    print_profile(lambda: m(tok, past), "context %d, %s" % (ctx, a.attention))
            except Exception as e:  # the timings below still count
                print("context %6d: op count or profile failed: %r" % (ctx, e), flush=True)
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
