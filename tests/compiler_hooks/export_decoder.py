#!/usr/bin/python3
"""Exports tierpool_models.llama_decoder() to ONNX as decoder exports for generation are laid
out: input_ids and past_key_values.N.key/value in, logits and present.N.key/value out, with
symbolic batch and sequence dimensions.

  export_decoder.py OUT.onnx [--opset 14] [--layers 2]
"""
import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "compiler_hooks", "torch"))
import torch  # noqa: E402
import tierpool_models  # noqa: E402


class FlatCache(torch.nn.Module):
    """The decoder with its cache as flat arguments, the way ONNX exports name them."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, *past):
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2))
        logits, present = self.model(input_ids, pairs)
        return (logits,) + tuple(t for kv in present for t in kv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--layers", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = tierpool_models.llama_decoder(layers=a.layers).eval()
    attn = model.layers[0].attention
    tokens = torch.randint(0, 1024, (1, 2))
    past = [torch.randn(1, attn.kv_heads, 3, attn.head_dim) for _ in range(2 * a.layers)]
    cache = ["%d.%s" % (i, kv) for i in range(a.layers) for kv in ("key", "value")]
    names_in = ["input_ids"] + ["past_key_values." + c for c in cache]
    names_out = ["logits"] + ["present." + c for c in cache]
    dynamic = {"input_ids": {0: "batch_size", 1: "sequence_length"}}
    dynamic.update({n: {0: "batch_size", 2: "past_sequence_length"} for n in names_in[1:]})
    dynamic.update({n: {0: "batch_size", 2: "total_sequence_length"} for n in names_out[1:]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(FlatCache(model), (tokens, *past), a.out, input_names=names_in,
                          output_names=names_out, dynamic_axes=dynamic, opset_version=a.opset)


if __name__ == "__main__":
    main()
