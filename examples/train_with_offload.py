#!/usr/bin/env python3
"""Trains a small GPT-style model on CPU three ways: plainly, with its activations offloaded to
tierpool, and with its activations and AdamW states offloaded; prints each run's losses, step
time and peak memory of the trainer, and checks the losses are identical.

    tierpoold --dram 2G &                   # or scripts/quickstart.sh --keep-running
    /usr/bin/python3 examples/train_with_offload.py [--steps 5] [--layers 8] [--socket PATH]

Memory is the trainer's own (anonymous) resident memory, sampled every millisecond: tierpoold's
shared pages that the client maps are the server's memory.
"""

import argparse
import os
import sys
import threading
import time

# glibc moves its mmap threshold up as big blocks are freed, and then keeps freed activations in
# the heap, where resident memory no longer shows what is alive: fix it before torch starts.
if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402

import tierpool  # noqa: E402
import tierpool.torch  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab, d, heads, layers, ctx):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.zeros(ctx, d))
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1))

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for b in self.blocks:
            x = b(x, self.mask[: idx.shape[1], : idx.shape[1]])
        return self.head(self.ln(x))


def anon_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakMemory:
    def __enter__(self):
        self.base, self.peak, self._stop = anon_bytes(), 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, anon_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, anon_bytes())


def run(mode, args, client):
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d_model, args.heads, args.layers, args.ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    if mode == "activations+optimizer":
        tierpool.torch.offload_optimizer(opt, client)
    acts = tierpool.torch.offload_activations(client, min_bytes=256 << 10, inflight_bytes=16 << 20,
                                                    prefetch_bytes=16 << 20) if mode != "plain" else None
    data = torch.Generator().manual_seed(1)
    losses, times = [], []
    with PeakMemory() as mem:
        for _ in range(args.steps):
            x = torch.randint(0, args.vocab, (args.batch, args.ctx), generator=data)
            y = torch.roll(x, -1, 1)
            start = time.perf_counter()
            if acts is not None:
                with acts:  # the three lines that add activation offload
                    logits = model(x)
            else:
                logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
            losses.append(loss.item())
    offloaded = (acts.offloaded_bytes // args.steps if acts else 0) + (
        opt.tierpool.offloaded_bytes if hasattr(opt, "tierpool") else 0)
    return losses, sorted(times)[len(times) // 2], mem.peak - mem.base, offloaded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=None)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=2048)
    args = ap.parse_args()
    client = tierpool.Client(args.socket, "train-example")
    results = {}
    print("%-24s %12s %16s %18s" % ("run", "step (p50)", "peak memory", "offloaded/step"))
    for mode in ("plain", "activations", "activations+optimizer"):
        losses, step, peak, off = run(mode, args, client)
        results[mode] = losses
        print("%-24s %9.0f ms %12.0f MiB %14.0f MiB" % (mode, step * 1e3, peak / 2**20,
                                                        off / 2**20))
    same = all(results[m] == results["plain"] for m in results)
    print("losses identical to the plain run: %s (%s)" % (same, ", ".join(
        "%.4f" % v for v in results["plain"])))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
