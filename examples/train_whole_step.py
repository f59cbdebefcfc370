#!/usr/bin/env python3
"""Trains a small transformer encoder on CPU under a memory budget with its whole step in
tierpool (tierpool.torch.offload): parameters, gradients, Adam's states and saved activations
are held by tierpoold and moved by the step's plan. The same training runs plainly first; the
example prints each planned step's report and checks that losses and parameters are those of
plain training, to the bit.

    tierpoold --dram 2G --hbm 1G &          # or scripts/quickstart.sh --keep-running
    /usr/bin/python3 examples/train_whole_step.py [--budget 60%] [--steps 5] [--socket PATH]

The plan is made with the `tierpool` tool: it must be on PATH, or named by TIERPOOL_TOOL.
"""

import argparse
import statistics
import time

import torch

import tierpool
import tierpool.torch


class Encoder(torch.nn.Module):
    def __init__(self, vocab=1000, d=128, layers=6):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)))


def batches(steps):
    g = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 1000, (8, 128), generator=g),
             torch.randint(0, 1000, (8, 128), generator=g)) for _ in range(steps)]


def train(data, client=None, budget=None):
    torch.manual_seed(0)
    model = Encoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    job = tierpool.torch.offload(model, optimizer, client, budget=budget) if client else None
    losses, times = [], []
    for x, y in data:  # the training loop, as it was
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        if job is not None and job.report is not None and len(job.reports) == len(losses) - 1:
            print(job.report)
    if job is not None:
        print("no-offload peak %.1f MiB; budget %.1f MiB (%.0f%%), of which %.1f MiB for hbm"
              % (job.no_offload_peak / 2**20, job.budget / 2**20,
                 100 * job.budget / job.no_offload_peak, job.hbm_budget / 2**20))
        job.close()  # parameters and states back in memory; the job's objects deleted
    return losses, [p.detach().clone() for p in model.parameters()], times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", default="60%")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--socket", default=None)
    a = ap.parse_args()
    torch.backends.mkldnn.enabled = False  # oneDNN picks kernels per call: not bit-exact
    data = batches(a.steps)
    plain_losses, plain_params, plain_times = train(data)
    with tierpool.Client(a.socket, "whole-step-example") as client:
        losses, params, times = train(data, client, a.budget)
    same = losses == plain_losses and all(torch.equal(p, q) for p, q in zip(params, plain_params))
    print("step time: plain %.3f s, offloaded %.3f s (medians after the first)"
          % (statistics.median(plain_times[1:]), statistics.median(times[1:])))
    print("losses and parameters identical to plain training:", same)


if __name__ == "__main__":
    main()
