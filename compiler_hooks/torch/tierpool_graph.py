"""FX graphs of aten ops -> tierpool lifetime schedules (protobuf's JSON mapping of
prefetch/proto/schedule.proto).

Shared by the training and inference tracer (tierpool_torch_schedule.py) and the generation
tracer (tierpool_generate.py): a ScheduleBuilder takes one traced graph after another, so that
the calls of a generation loop become one schedule whose tensors (weights, the KV cache) carry
from one call to the next.
"""
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


def tracing_api():
    """(torch, make_fx, functional_call) for Debian's PyTorch 1.13 and for PyTorch 2.x, where
    functorch's entry points moved into torch.fx and torch.func."""
    try:
        import torch
        from torch.fx.experimental.proxy_tensor import make_fx
    except ImportError as e:
        fail("cannot import torch (%s); install python3-torch and run with /usr/bin/python3" % e)
    try:
        from torch.func import functional_call
    except ImportError:
        from torch.nn.utils.stateless import functional_call
    return torch, make_fx, functional_call


def tied_names(model):
    """{name: the name named_parameters() lists its tensor under} for each parameter or buffer a
    model holds under a second name (an embedding tied to the output projection).
    named_parameters() lists a shared tensor once, and functional_call replaces only the names it
    is given: without the second name the module would keep the real tensor there, which the
    fake-tensor trace refuses (and a trace would not count its gradient)."""
    first = {}
    for n, t in list(model.named_parameters()) + list(model.named_buffers()):
        first.setdefault(id(t), n)
    out = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for kind in (module._parameters, module._buffers):
            for n, t in kind.items():
                name = prefix + "." + n if prefix else n
                if t is not None and id(t) in first and first[id(t)] != name:
                    out[name] = first[id(t)]
    return out


def with_tied(values, tied):
    """values (name -> tensor) with each tied name given its first name's tensor."""
    return {**values, **{alias: values[name] for alias, name in tied.items() if name in values}}


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
    if op.startswith("_scaled_dot_product_") or op == "scaled_dot_product_attention":
        # Q K^T and the weighted sum, 2 B H L S D each; backward recomputes Q K^T and makes
        # dQ, dK, dV and dP: five of them. Backward ops take grad_out first, then q, k.
        backward = op.endswith("_backward")
        q, k = (shape(1), shape(2)) if backward else (shape(0), shape(1))
        if not q or not k or len(q) < 3 or len(k) < 3:
            return 0.0
        per = 2.0 * numel(q[:-1]) * k[-2] * q[-1]
        return (5 if backward else 2) * per
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


def element_size(v):
    import torch
    return torch.empty((), dtype=v.dtype).element_size()


class ScheduleBuilder:
    """Steps and tensors of a schedule, built from traced graphs.

    Each non-view aten op of a graph is one step with its FLOPs and the bytes it touches; views
    and tuple unpacking alias their base tensor and allocate nothing."""

    def __init__(self):
        self.tensors = []  # dicts in the JSON mapping, plus "forward" while building
        self.steps = []

    def new_tensor(self, name, v, kind, def_step):
        tid = len(self.tensors)
        self.tensors.append({"id": tid, "name": name, "size_bytes": str(numel(v.shape) * element_size(v)),
                             "dtype": str(v.dtype).replace("torch.", ""),
                             "shape": [int(d) for d in v.shape], "kind": kind,
                             "def_step": def_step, "use_steps": [], "update_steps": []})
        return tid

    def size(self, tid):
        return int(self.tensors[tid]["size_bytes"])

    def add_graph(self, gm, placeholder_ids, prefix="", loss_node=None):
        """Adds the call_function nodes of `gm` as steps. `placeholder_ids` gives, for each
        placeholder in order, the tensor it is (None: not a tensor). Tensors made before
        `loss_node` and after it are told apart for training (SAVED_ACTIVATION marking).

        Returns (the tensor id of each element of the graph's flattened output, or None;
        {node name: step}; the first step after loss_node, or None)."""
        tensors, steps = self.tensors, self.steps
        nodes = list(gm.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        base = {}  # (node name, tuple index) -> tensor id, for aliases too
        for n, tid in zip(placeholders, placeholder_ids):
            if tid is not None:
                base[(n.name, None)] = tid

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

        forward = loss_node is not None
        step_of_node = {}
        first_backward_step = None
        for n in nodes:
            if n.op != "call_function":
                continue
            op = op_name(n.target)
            if op in ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm") \
                    and len(n.args) > 5 and n.args[5] is False:
                # Eval mode: one pass that scales and shifts, not the training op's statistics
                # pass and normalisation; newer PyTorch gives it this name (PyTorch 2 traces
                # fp32 eval batch norm on CUDA as cudnn_batch_norm, training=False).
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
                    # Multi-output ops (convolution_backward, ...) may carry no value themselves
                    # in torch 1.13; the element is made by the op's step, seen through its getitem.
                    s = step_of_node[src.name]
                    tid = self.new_tensor("%s%s.%d" % (prefix, src.name, idx), v, "ACTIVATION", s)
                    tensors[tid]["forward"] = loss_node is not None and (
                        first_backward_step is None or s < first_backward_step)
                    base[(src.name, idx)] = tid
                    steps[s]["bytes_touched"] = str(int(steps[s]["bytes_touched"]) + self.size(tid))
                if (src.name, idx) in base:
                    base[(n.name, None)] = base[(src.name, idx)]
                elif (src.name, None) in base and src.name not in step_of_node:
                    # An element of a multi-output view (split, chunk, unbind) that torch 1.13
                    # traced without a value: the whole op aliased its input, so does each part.
                    base[(n.name, None)] = base[(src.name, None)]
                continue
            if op in VIEW_OPS and len(ins) == 1 and not isinstance(v, (tuple, list)):
                base[(n.name, None)] = ins[0]
                continue
            step = len(steps)
            step_of_node[n.name] = step
            bytes_touched = sum(self.size(t) for t in ins)
            outs = list(enumerate(v)) if isinstance(v, (tuple, list)) else [(None, v)]
            for idx, ov in outs:
                if ov is None or not hasattr(ov, "shape"):
                    continue
                name = prefix + (n.name if idx is None else "%s.%d" % (n.name, idx))
                tid = self.new_tensor(name, ov, "ACTIVATION", step)
                tensors[tid]["forward"] = forward
                base[(n.name, idx)] = tid
                bytes_touched += self.size(tid)
            for t in ins:
                tensors[t]["use_steps"].append(step)
            steps.append({"name": prefix + n.name, "op_type": op, "flops": flops_of(op, n, val_of),
                          "bytes_touched": str(bytes_touched)})
            if n is loss_node:
                forward = False
                first_backward_step = step + 1

        output_node = next(n for n in nodes if n.op == "output")
        flat = output_node.args[0]
        flat = list(flat) if isinstance(flat, (list, tuple)) else [flat]
        out_ids = [base.get((x.name, None)) if hasattr(x, "name") else None for x in flat]
        return out_ids, step_of_node, first_backward_step

    def schedule(self, name, source, repeats):
        for t in self.tensors:
            t.pop("forward", None)
            t["use_steps"] = sorted(set(t["use_steps"]))
            if not t["update_steps"]:
                del t["update_steps"]
        return {"format_version": 1, "name": name, "source": source, "repeats": repeats,
                "steps": self.steps, "tensors": self.tensors}
