#!/usr/bin/python3
"""PyTorch -> tierpool lifetime schedule.

Traces a model's joint forward and backward graph with make_fx on fake tensors (no
real compute, little memory), then writes the schedule in protobuf's JSON mapping of
prefetch/proto/schedule.proto. Run by `tierpool schedule from-torch`; runs on Debian's
python3-torch (1.13) and on PyTorch 2.x.

  tierpool_torch_schedule.py --model torchvision.models:resnet50 --input 32x3x224x224 \
      --optimizer adam --out resnet50.json

Each non-view aten op is one step with its FLOPs (matmuls, convolutions and their backward) and
the bytes it touches; views and tuple unpacking alias their base tensor and allocate nothing.
Parameters are WEIGHT, forward tensors the backward pass reads are SAVED_ACTIVATION, the graph's
gradient outputs are GRADIENT, and an optimizer adds its states (OPTIMIZER_STATE) and one update
step per parameter. The schedule repeats (a training loop). With --inference only the forward
pass is traced, in eval mode and without gradients (a serving loop).
"""
import argparse
import importlib
import json
import os
import sys

from tierpool_attention import fused_attention  # noqa: E402
from tierpool_static_shapes import static_repeats  # noqa: E402
from tierpool_graph import (ScheduleBuilder, fail, numel, parse_shape, tied_names,  # noqa: E402
                            tracing_api, with_tied)


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="MODULE:CALLABLE returning an nn.Module")
    ap.add_argument("--input", action="append", help="input shape, e.g. 32x3x224x224")
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd", "none"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--out", required=True, help="schedule JSON to write")
    ap.add_argument("--no-repeat", action="store_true")
    ap.add_argument("--inference", action="store_true",
                    help="trace the forward pass only (model.eval(), no gradients, no optimizer)")
    ap.add_argument("--attention", default="fused", choices=["fused", "decomposed"],
                    help="fused: MultiheadAttention's attention as one op with its own backward, as "
                         "PyTorch 2 runs it (tierpool_attention); decomposed: as this PyTorch traces it")
    ap.add_argument("--generate", metavar="PROMPT:NEW_TOKENS",
                    help="trace generation: a prefill, then decodes with a KV cache (tierpool_generate)")
    ap.add_argument("--batch", type=int, default=1, help="--generate: sequences per call")
    ap.add_argument("--prefill-chunk", type=int, default=0, help="--generate: prompt tokens per prefill call")
    ap.add_argument("--decode-only", action="store_true",
                    help="--generate: the prompt's KV cache exists at the start; trace the decodes only")
    return ap


def build_model(a):
    """The model and its inputs as `a` (build_parser's arguments) says, on a.device (cpu unless
    calibration set it): (torch, model, inputs)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tierpool_models
    sys.path.insert(0, os.getcwd())
    torch, _, _ = tracing_api()
    if ":" not in a.model:
        fail("--model takes MODULE:CALLABLE, e.g. torchvision.models:resnet50")
    mod_name, fn_name = a.model.split(":", 1)
    try:
        module = importlib.import_module(mod_name)
    except ImportError as e:
        fail("cannot import %s: %s" % (mod_name, e))
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        fail("%s has no callable %s" % (mod_name, fn_name))
    model = fn()
    if not isinstance(model, torch.nn.Module):
        fail("%s() returned %s, not an nn.Module" % (a.model, type(model).__name__))
    dtype = getattr(torch, a.dtype)
    device = getattr(a, "device", "cpu")  # calibration traces where it will run
    model = model.to(device=device, dtype=dtype)
    model = model.eval() if a.inference else model.train()

    inputs = []
    for text in a.input:
        dims, in_dtype = parse_shape(text)
        if in_dtype and "int" in in_dtype:
            inputs.append(torch.randint(0, 1000, dims, dtype=getattr(torch, in_dtype), device=device))
        else:
            inputs.append(torch.randn(dims, dtype=dtype, device=device))
    return torch, model, inputs


def first_tensor(out):
    """The tensor a loss is built from: the model's output, or the first tensor in it."""
    if hasattr(out, "shape") and hasattr(out, "dtype"):
        return out
    if isinstance(out, (list, tuple)):
        return first_tensor(out[0])
    if isinstance(out, dict):
        return first_tensor(next(iter(out.values())))
    fail("the model returned %s; cannot build a loss from it" % type(out).__name__)


def trace(a):
    """Traces the model as `a` (build_parser's arguments) says; returns the schedule (a dict in
    protobuf's JSON mapping), the traced module, the arguments it was traced with (flattened
    as its placeholders take them) and, for each step, the graph node it came from."""

    _, make_fx, functional_call = tracing_api()
    torch, model, inputs = build_model(a)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = list(params)
    tied = tied_names(model)

    def train_step(params, buffers, *xs):
        out = functional_call(model, with_tied({**params, **buffers}, tied), tuple(xs))
        loss = first_tensor(out).float().sum()
        grads = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
        return loss, grads

    def infer_step(params, buffers, *xs):
        with torch.no_grad():
            return first_tensor(
                functional_call(model, with_tied({**params, **buffers}, tied), tuple(xs)))

    try:
        with fused_attention(getattr(a, "attention", "fused") == "fused"), static_repeats():
            gm = make_fx(infer_step if a.inference else train_step, tracing_mode="fake")(
                params, buffers, *inputs)
    except Exception as e:  # noqa: BLE001 - any tracing failure is reported, not a traceback
        fail("tracing %s failed: %s: %s" % (a.model, type(e).__name__, e))

    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    n_params, n_buffers = len(params), len(buffers)
    builder = ScheduleBuilder()
    tensors, steps = builder.tensors, builder.steps
    placeholder_ids = []
    for i, n in enumerate(placeholders):
        v = n.meta.get("val")
        if v is None or not hasattr(v, "shape"):
            placeholder_ids.append(None)
            continue
        if i < n_params:
            kind, name = "WEIGHT", names[i]
        elif i < n_params + n_buffers:
            kind, name = "OTHER", list(buffers)[i - n_params]
        else:
            kind, name = "INPUT", "input%d" % (i - n_params - n_buffers)
        placeholder_ids.append(builder.new_tensor(name, v, kind, -1))

    output_node = next(n for n in nodes if n.op == "output")
    loss_node = None if a.inference else list(output_node.args[0])[0]
    # make_fx flattens (loss, grads) to [loss, g0, g1, ...]
    out_ids, step_of_node, first_backward_step = builder.add_graph(gm, placeholder_ids,
                                                                   loss_node=loss_node)
    grad_ids = [] if a.inference else out_ids[1:]

    # Forward tensors the backward pass reads are saved for it; gradients are the outputs.
    first_backward = first_backward_step if first_backward_step is not None else len(steps)
    for t in tensors:
        if t["kind"] == "ACTIVATION" and t.get("forward") and any(u >= first_backward for u in t["use_steps"]):
            t["kind"] = "SAVED_ACTIVATION"
    grads = []
    for name, tid in zip(names, grad_ids):
        if tid is None:
            continue
        if tensors[tid]["kind"] == "WEIGHT":  # a gradient that is the weight itself: skip
            continue
        tensors[tid]["kind"] = "GRADIENT"
        grads.append((name, tid))

    # The optimizer: one update step per parameter, reading its gradient and states.
    param_id = {tensors[i]["name"]: i for i in range(len(tensors)) if tensors[i]["kind"] == "WEIGHT"}
    if a.optimizer == "none" and not a.inference:
        step = len(steps)
        steps.append({"name": "gradients_ready", "op_type": "sync", "flops": 0.0,
                      "bytes_touched": str(sum(int(tensors[g]["size_bytes"]) for _, g in grads))})
        for _, g in grads:
            tensors[g]["use_steps"].append(step)
    for name, g in grads:
        if a.optimizer == "none" or a.inference:
            break
        p = param_id[name]
        step = len(steps)
        state_ids = []
        if a.optimizer == "adam":
            for state in ("exp_avg", "exp_avg_sq"):
                shape = tensors[p]["shape"]
                sid = len(tensors)
                tensors.append({"id": sid, "name": "%s.%s" % (name, state),
                                "size_bytes": str(numel(shape) * 4), "dtype": "float32",
                                "shape": shape, "kind": "OPTIMIZER_STATE", "def_step": -1,
                                "use_steps": [step], "update_steps": [step]})
                state_ids.append(sid)
        touched = [p, g] + state_ids
        steps.append({"name": "%s_update.%s" % (a.optimizer, name), "op_type": a.optimizer,
                      "flops": 10.0 * numel(tensors[p]["shape"]),
                      # read all, write the parameter and the states back
                      "bytes_touched": str(sum(int(tensors[t]["size_bytes"]) for t in touched) +
                                           sum(int(tensors[t]["size_bytes"]) for t in [p] + state_ids))})
        tensors[p]["use_steps"].append(step)
        tensors[p]["update_steps"].append(step)
        tensors[g]["use_steps"].append(step)

    schedule = builder.schedule(a.model.split(":")[-1], "torch:" + a.model, not a.no_repeat)
    nodes_of_step = {s: name for name, s in step_of_node.items()}
    return schedule, gm, [*params.values(), *buffers.values(), *inputs], nodes_of_step


def main():
    a = build_parser().parse_args()
    if a.generate:
        from tierpool_generate import trace_generate
        schedule = trace_generate(a)
        with open(a.out, "w") as f:
            json.dump(schedule, f)
        kv = [t for t in schedule["tensors"] if t["kind"] == "KV_CACHE"]
        sys.stderr.write("traced %s: %d steps, %d tensors (%d KV cache)\n"
                         % (schedule["source"], len(schedule["steps"]), len(schedule["tensors"]), len(kv)))
        return
    if not a.input:
        fail("--input SHAPE is needed (or --generate PROMPT:NEW_TOKENS)")
    schedule, _, _, _ = trace(a)
    tensors, steps = schedule["tensors"], schedule["steps"]
    params = [t for t in tensors if t["kind"] == "WEIGHT"]
    grads = [t for t in tensors if t["kind"] == "GRADIENT"]
    with open(a.out, "w") as f:
        json.dump(schedule, f)
    n_saved = sum(1 for t in tensors if t["kind"] == "SAVED_ACTIVATION")
    sys.stderr.write("traced %s: %d steps, %d tensors (%d parameters, %d saved activations, %d gradients)\n"
                     % (a.model, len(steps), len(tensors), len(params), n_saved, len(grads)))


if __name__ == "__main__":
    main()
