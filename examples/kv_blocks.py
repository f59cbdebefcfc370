#!/usr/bin/env python3
"""KV-cache reuse across requests, as an inference server would do it with tierpool: a prompt's
full 16-token blocks are stored under chained hashes of their tokens, and a later prompt that
shares a prefix finds those blocks (lookup) and reads them (get_blocks) instead of recomputing.

    tierpoold &                             # or scripts/quickstart.sh --keep-running
    /usr/bin/python3 examples/kv_blocks.py [--socket PATH]
"""

import argparse
import time

import torch

import tierpool
import tierpool.torch

LAYERS, HEADS, HEAD_DIM, BLOCK = 4, 8, 64, 16


def compute_kv(model, tokens):
    """A stand-in for prefill: K and V of every layer for each token, [blocks, L, 2, H, B, D]."""
    x = model["emb"](torch.tensor(tokens))
    kv = []
    for wk, wv in model["layers"]:
        k = (x @ wk).view(-1, HEADS, HEAD_DIM).transpose(0, 1)
        v = (x @ wv).view(-1, HEADS, HEAD_DIM).transpose(0, 1)
        kv.append(torch.stack([k, v]))
    kv = torch.stack(kv)  # [L, 2, H, T, D]
    n = len(tokens) // BLOCK
    return kv[:, :, :, : n * BLOCK].reshape(LAYERS, 2, HEADS, n, BLOCK, HEAD_DIM) \
        .permute(3, 0, 1, 2, 4, 5).contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    d = HEADS * HEAD_DIM
    model = {"emb": torch.nn.Embedding(32000, d),
             "layers": [(torch.randn(d, d) / d**0.5, torch.randn(d, d) / d**0.5)
                        for _ in range(LAYERS)]}
    with tierpool.Client(args.socket, "kv-example") as client, torch.no_grad():
        kv = tierpool.torch.KVBlockStore(client, "toy-llm", block_tokens=BLOCK)
        system = list(range(1, 193))                     # a 192-token system prompt: 12 blocks
        first = system + [500 + i for i in range(40)]    # request 1
        second = system + [900 + i for i in range(70)]   # request 2: same system prompt

        blocks = compute_kv(model, first)
        stored = kv.put_blocks(first, blocks)
        print("request 1: %d tokens, stored %d blocks of %d tokens (%.1f MiB)"
              % (len(first), stored, BLOCK, blocks.numel() * 4 / 2**20))

        hit = kv.lookup(second)
        print("request 2: %d tokens, prefix hit %d tokens (%d blocks)"
              % (len(second), hit, hit // BLOCK))
        out = torch.empty((hit // BLOCK,) + tuple(blocks.shape[1:]))
        start = time.perf_counter()
        got = kv.get_blocks(second[:hit], out)
        fetch_ms = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        recomputed = compute_kv(model, second[:hit])
        compute_ms = (time.perf_counter() - start) * 1e3
        print("           read %d blocks in %.2f ms (recomputing them: %.2f ms); identical: %s"
              % (got, fetch_ms, compute_ms, torch.equal(out, recomputed)))
        print("a prompt with another first token hits %d tokens" % kv.lookup([7] + second[1:]))


if __name__ == "__main__":
    main()
