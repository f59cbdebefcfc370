#!/usr/bin/python3
"""PyTorch -> tierpool lifetime schedule.

Traces a model's joint forward and backward graph with functorch's make_fx on fake tensors (no
real compute, little memory), then writes the schedule in protobuf's JSON mapping of
prefetch/proto/schedule.proto. Run by `tierpool schedule from-torch`; runs on Debian's
python3-torch (1.13).

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

# Ops whose output shares its input's storage: no new memory, no real work.
VIEW_OPS = {
    "t", "view", "_unsafe_view", "expand", "detach", "alias", "permute", "transpose", "squeeze",
    "unsqueeze", "slice", "select", "as_strided", "reshape", "split", "split_with_sizes", "chunk",
    "unbind", "narrow", "diagonal", "expand_as", "view_as", "numpy_T", "lift_fresh", "lift",
    "_reshape_alias", "unfold",
}


def fail(msg):
    sys.stderr.write("tierpool from-torch: " + msg + "\n")
    sys.exit(2)


def parse_shape(text):
    dtype = None
    if ":" in text:
        text, dtype = text.split(":", 1)
    try:
        dims = [int(d) for d in text.lower().split("x")]
    except ValueError:
        fail("--input takes a shape like 32x3x224x224 (optionally :int64), got %r" % text)
    if not dims or any(d <= 0 for d in dims):
        fail("--input dimensions must be positive: %r" % text)
    return dims, dtype


def op_name(target):
    name = getattr(target, "__name__", str(target))  # e.g. "addmm.default"
    return name.split(".")[0]


def numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def flops_of(op, node, val_of):
    """FLOPs of the ops that dominate training time; 0 for memory-bound ones."""
    args = node.args

    def shape(i):
        v = val_of(args[i]) if i < len(args) else None
        return list(v.shape) if v is not None and hasattr(v, "shape") else None

    out = node.meta.get("val")
    if op == "mm":
        a, b = shape(0), shape(1)
        return 2.0 * a[0] * a[1] * b[1] if a and b else 0.0
    if op == "addmm":
        a, b = shape(1), shape(2)
        return 2.0 * a[0] * a[1] * b[1] if a and b else 0.0
    if op in ("bmm", "baddbmm"):
        a, b = (shape(0), shape(1)) if op == "bmm" else (shape(1), shape(2))
        return 2.0 * a[0] * a[1] * a[2] * b[2] if a and b else 0.0
    if op == "convolution":
        w = shape(1)
        groups = args[8] if len(args) > 8 else 1
        if w is None or out is None:
            return 0.0
        return 2.0 * numel(out.shape) * numel(w[1:]) / max(1, 1 if not args[6] else groups)
    if op == "convolution_backward":
        g, w = shape(0), shape(2)
        # grad input and grad weight: about twice the forward's work.
        return 4.0 * numel(g) * numel(w[1:]) if g and w else 0.0
    if op in ("_native_multi_head_attention", "_transformer_encoder_layer_fwd"):
        # Eval-mode fast paths of nn.MultiheadAttention and nn.TransformerEncoderLayer: the
        # q/k/v and output projections, Q K^T and the weighted sum, and for the layer its MLP.
        q = shape(0)
        if not q or len(q) != 3:
            return 0.0
        b, l, e = q
        if op == "_native_multi_head_attention":
            k = shape(1)
            src_len = k[1] if k and len(k) == 3 else l
            return 2.0 * b * (l * e * e + 2 * src_len * e * e) + 4.0 * b * l * src_len * e + 2.0 * b * l * e * e
        ffn = shape(14)  # ffn_weight_1: [F, E]
        f = ffn[0] if ffn else 4 * e
        return 2.0 * b * l * 3 * e * e + 4.0 * b * l * l * e + 2.0 * b * l * e * e + 4.0 * b * l * e * f
    return 0.0


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="MODULE:CALLABLE returning an nn.Module")
    ap.add_argument("--input", action="append", required=True, help="input shape, e.g. 32x3x224x224")
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd", "none"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--out", required=True, help="schedule JSON to write")
    ap.add_argument("--no-repeat", action="store_true")
    ap.add_argument("--inference", action="store_true",
                    help="trace the forward pass only (model.eval(), no gradients, no optimizer)")
    return ap


def trace(a):
    """Traces the model as `a` (build_parser's arguments) says; returns the schedule (a dict in
    protobuf's JSON mapping), the traced module, the arguments it was traced with (flattened
    as its placeholders take them) and, for each step, the graph node it came from."""

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tierpool_models
    sys.path.insert(0, os.getcwd())
    try:
        import torch
        from functorch import make_fx
        from torch.nn.utils import stateless
    except ImportError as e:
        fail("cannot import torch/functorch (%s); install python3-torch and run with /usr/bin/python3" % e)

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

    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = list(params)

    def first_tensor(out):
        if isinstance(out, torch.Tensor):
            return out
        if isinstance(out, (list, tuple)):
            return first_tensor(out[0])
        if isinstance(out, dict):
            return first_tensor(next(iter(out.values())))
        fail("the model returned %s; cannot build a loss from it" % type(out).__name__)

    def train_step(params, buffers, *xs):
        out = stateless.functional_call(model, {**params, **buffers}, tuple(xs))
        loss = first_tensor(out).float().sum()
        grads = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
        return loss, grads

    def infer_step(params, buffers, *xs):
        with torch.no_grad():
            return first_tensor(stateless.functional_call(model, {**params, **buffers}, tuple(xs)))

    try:
        gm = make_fx(infer_step if a.inference else train_step, tracing_mode="fake")(
            params, buffers, *inputs)
    except Exception as e:  # noqa: BLE001 - any tracing failure is reported, not a traceback
        fail("tracing %s failed: %s: %s" % (a.model, type(e).__name__, e))

    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    n_params, n_buffers = len(params), len(buffers)

    tensors = []   # schedule tensors (dicts)
    steps = []
    base = {}      # (node name, tuple index) -> tensor id, for aliases too
    elem_size = lambda v: torch.empty((), dtype=v.dtype).element_size()

    def new_tensor(name, v, kind, def_step):
        tid = len(tensors)
        tensors.append({"id": tid, "name": name, "size_bytes": str(numel(v.shape) * elem_size(v)),
                        "dtype": str(v.dtype).replace("torch.", ""), "shape": [int(d) for d in v.shape],
                        "kind": kind, "def_step": def_step, "use_steps": [], "update_steps": []})
        return tid

    for i, n in enumerate(placeholders):
        v = n.meta.get("val")
        if v is None or not hasattr(v, "shape"):
            continue
        if i < n_params:
            kind, name = "WEIGHT", names[i]
        elif i < n_params + n_buffers:
            kind, name = "OTHER", list(buffers)[i - n_params]
        else:
            kind, name = "INPUT", "input%d" % (i - n_params - n_buffers)
        base[(n.name, None)] = new_tensor(name, v, kind, -1)

    def val_of(arg):
        return arg.meta.get("val") if hasattr(arg, "meta") else None

    def tensor_ids(arg):
        """Tensor ids an argument refers to (through aliases)."""
        out = []
        if isinstance(arg, (list, tuple)):
            for x in arg:
                out += tensor_ids(x)
        elif hasattr(arg, "name") and (arg.name, None) in base:
            out.append(base[(arg.name, None)])
        return out

    output_node = next(n for n in nodes if n.op == "output")
    if a.inference:
        loss_node, grad_nodes = None, []
    else:
        flat = list(output_node.args[0])  # make_fx flattens (loss, grads) to [loss, g0, g1, ...]
        loss_node, grad_nodes = flat[0], flat[1:]
    forward = True
    step_of_node = {}
    first_backward_step = None
    for n in nodes:
        if n.op != "call_function":
            continue
        op = op_name(n.target)
        if op == "native_batch_norm" and len(n.args) > 5 and n.args[5] is False:
            # Eval mode: one pass that scales and shifts, not the training op's statistics pass
            # and normalisation; newer PyTorch gives it this name.
            op = "_native_batch_norm_legit_no_training"
        v = n.meta.get("val")
        ins = []
        for arg in list(n.args) + list(n.kwargs.values()):
            for t in tensor_ids(arg):
                if t not in ins:
                    ins.append(t)
        if op == "getitem":
            src, idx = n.args[0], n.args[1]
            if (src.name, idx) not in base and src.name in step_of_node and v is not None \
                    and hasattr(v, "shape"):
                # Multi-output ops (convolution_backward, ...) may carry no value themselves in
                # torch 1.13; the element is made by the op's step, seen through its getitem.
                s = step_of_node[src.name]
                tid = new_tensor("%s.%d" % (src.name, idx), v, "ACTIVATION", s)
                tensors[tid]["forward"] = s < (first_backward_step if first_backward_step is not None else 1 << 60)
                base[(src.name, idx)] = tid
                steps[s]["bytes_touched"] = str(int(steps[s]["bytes_touched"]) + int(tensors[tid]["size_bytes"]))
            if (src.name, idx) in base:
                base[(n.name, None)] = base[(src.name, idx)]
            continue
        if op in VIEW_OPS and len(ins) == 1 and not isinstance(v, (tuple, list)):
            base[(n.name, None)] = ins[0]
            continue
        step = len(steps)
        step_of_node[n.name] = step
        bytes_touched = sum(int(tensors[t]["size_bytes"]) for t in ins)
        outs = list(enumerate(v)) if isinstance(v, (tuple, list)) else [(None, v)]
        for idx, ov in outs:
            if ov is None or not hasattr(ov, "shape"):
                continue
            kind = "ACTIVATION"
            tid = new_tensor(n.name if idx is None else "%s.%d" % (n.name, idx), ov, kind, step)
            tensors[tid]["forward"] = forward
            base[(n.name, idx)] = tid
            bytes_touched += int(tensors[tid]["size_bytes"])
        for t in ins:
            tensors[t]["use_steps"].append(step)
        steps.append({"name": n.name, "op_type": op, "flops": flops_of(op, n, val_of),
                      "bytes_touched": str(bytes_touched)})
        if n is loss_node:
            forward = False
            first_backward_step = step + 1

    # Forward tensors the backward pass reads are saved for it; gradients are the outputs.
    first_backward = first_backward_step if first_backward_step is not None else len(steps)
    for t in tensors:
        if t["kind"] == "ACTIVATION" and t.get("forward") and any(u >= first_backward for u in t["use_steps"]):
            t["kind"] = "SAVED_ACTIVATION"
    grads = []
    for name, g in zip(names, grad_nodes):
        if g is None:
            continue
        tid = base.get((g.name, None))
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

    for t in tensors:
        t.pop("forward", None)
        t["use_steps"] = sorted(set(t["use_steps"]))
        if not t["update_steps"]:
            del t["update_steps"]
    schedule = {"format_version": 1, "name": a.model.split(":")[-1], "source": "torch:" + a.model,
                "repeats": not a.no_repeat, "steps": steps, "tensors": tensors}
    nodes_of_step = {s: name for name, s in step_of_node.items()}
    return schedule, gm, [*params.values(), *buffers.values(), *inputs], nodes_of_step


def main():
    a = build_parser().parse_args()
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
