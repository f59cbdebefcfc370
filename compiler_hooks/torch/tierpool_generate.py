"""Generation (prefill and decode) of a decoder-only model -> one lifetime schedule.

Run through `tierpool schedule from-torch --model M:C --generate PROMPT:NEW_TOKENS`. The model
callable returns an nn.Module called as

    logits, present = model(tokens, past)

tokens: BATCH x T int64; past: None for the first call, else the previous call's `present`;
present: any nesting of tuples and lists of tensors (usually a (key, value) pair per layer) that
hold the context so far. tierpool_models.LlamaDecoder is one.

Each call (a prefill of PROMPT tokens, in chunks of --prefill-chunk if given, then NEW_TOKENS
decodes of one token each) is traced with make_fx on the meta device, so a model of any size
and a context of any length trace without memory. The calls become one schedule: the weights
are shared, each call's `present` tensors are KV_CACHE and are the next call's `past`, and each
grows by the bytes of the tokens added (the cat that grows it is timed as an in-place append, as
a serving engine's paged cache does it). With --decode-only the prompt's cache arrives in a first
step (filled by a prefill elsewhere, as disaggregated serving does) and only the decodes are
traced.
"""
import importlib

from tierpool_graph import ScheduleBuilder, fail, tied_names, tracing_api, with_tied
from tierpool_static_shapes import static_repeats


def parse_generate(text):
    try:
        prompt, new_tokens = (int(x) for x in text.split(":"))
    except ValueError:
        fail("--generate takes PROMPT:NEW_TOKENS, e.g. 4096:16, got %r" % text)
    if prompt < 1 or new_tokens < 0 or new_tokens > 100000:
        fail("--generate needs PROMPT >= 1 and 0 <= NEW_TOKENS <= 100000, got %r" % text)
    return prompt, new_tokens


def meta_mode(torch):
    """A TorchFunctionMode that puts every tensor a factory makes on the meta device: the model
    is built without memory for its weights (torch 1.13 has no `with torch.device("meta")`)."""
    from torch.overrides import TorchFunctionMode

    factories = {torch.empty, torch.zeros, torch.ones, torch.full, torch.arange, torch.rand,
                 torch.randn, torch.randint, torch.tensor, torch.empty_strided, torch.eye,
                 torch.linspace}

    class MetaMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in factories:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    return MetaMode()


def time_as_append(builder, past, present):
    """A serving engine appends each new token to its (paged) cache in place: the cat that
    makes `present` from `past` is timed as that append, the new tokens' bytes read and
    written, not as a copy of the whole cache."""
    step = builder.tensors[present]["def_step"]
    if builder.steps[step]["op_type"] == "cat" and step in builder.tensors[past]["use_steps"]:
        added = builder.size(present) - builder.size(past)
        builder.steps[step]["bytes_touched"] = str(2 * max(0, added))


def trace_generate(a):
    torch, make_fx, functional_call = tracing_api()
    from torch.utils import _pytree as pytree
    prompt, new_tokens = parse_generate(a.generate)
    if a.batch < 1:
        fail("--batch must be >= 1")
    chunk = a.prefill_chunk or prompt
    if chunk < 1:
        fail("--prefill-chunk must be >= 1")

    mod_name, _, fn_name = a.model.partition(":")
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as e:
        fail("cannot load %s: %s" % (a.model, e))
    with meta_mode(torch):
        model = fn()
    if not isinstance(model, torch.nn.Module):
        fail("%s() returned %s, not an nn.Module" % (a.model, type(model).__name__))
    model = model.to(device="meta", dtype=getattr(torch, a.dtype)).eval()
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    tied = tied_names(model)

    def tokens(n):
        return torch.empty((a.batch, n), dtype=torch.int64, device="meta")

    def call(tok, past):
        # On meta tensors as the traces are: repeat_interleave (grouped-query attention) needs
        # its static form here too (it failed --decode-only's prompt call before).
        with torch.no_grad(), static_repeats():
            out = functional_call(model, with_tied({**params, **buffers}, tied), (tok, past))
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            fail("%s must return (logits, present); it returned %s" % (a.model, type(out).__name__))
        return out

    builder = ScheduleBuilder()
    fixed = [builder.new_tensor(n, v, "WEIGHT", -1) for n, v in params.items()]
    fixed += [builder.new_tensor(n, v, "OTHER", -1) for n, v in buffers.items()]

    # The calls: (label, tokens) in order.
    calls = []
    if not a.decode_only:
        for start in range(0, prompt, chunk):
            n = min(chunk, prompt - start)
            calls.append(("prefill" if n == prompt else "prefill%d" % (start // chunk), n))
    calls += [("decode%d" % i, 1) for i in range(new_tokens)]
    if not calls:
        fail("nothing to trace: --decode-only with 0 new tokens")

    past, past_ids, spec = None, [], None
    if a.decode_only:
        # The prompt's cache, as its prefill leaves it (shapes only, on meta), arrives in the
        # first step (from a prefill node, in disaggregated serving) and lives as long as it is
        # used, like every other cache tensor.
        _, present = call(tokens(prompt), None)
        flat, spec = pytree.tree_flatten(present)
        past_ids = [builder.new_tensor("prompt/past.%d" % i, v, "KV_CACHE", 0) for i, v in enumerate(flat)]
        builder.steps.append({"name": "prompt/cache_arrives", "op_type": "sync", "flops": 0.0,
                              "bytes_touched": "0"})
        past = flat

    holder = {}

    def step(params_, buffers_, tok, *flat_past):
        p = pytree.tree_unflatten(list(flat_past), holder["in_spec"]) if flat_past else None
        with torch.no_grad():
            logits, present = functional_call(model, with_tied({**params_, **buffers_}, tied),
                                              (tok, p))
        flat_present, holder["out_spec"] = pytree.tree_flatten(present)
        return (logits, *flat_present)

    class ValueProp(torch.fx.Interpreter):
        """Records each node's (meta) value where the fake-tensor tracer would."""

        def run_node(self, n):
            r = super().run_node(n)
            n.meta["val"] = r
            return r

    for label, n in calls:
        tok = tokens(n)
        flat_past = list(past) if past is not None else []
        holder["in_spec"] = spec
        try:
            with static_repeats():
                gm = make_fx(step)(params, buffers, tok, *flat_past)
            outs = ValueProp(gm).run(params, buffers, tok, *flat_past)
        except Exception as e:  # noqa: BLE001 - any tracing failure is reported, not a traceback
            fail("tracing %s (%s) failed: %s: %s" % (a.model, label, type(e).__name__, e))
        tok_id = builder.new_tensor(label + "/tokens", tok, "INPUT", -1)
        out_ids, _, _ = builder.add_graph(gm, fixed + [tok_id] + past_ids, prefix=label + "/")
        if any(t is None for t in out_ids):
            fail("%s: an output of %s is not a tensor the graph made" % (a.model, label))
        builder.tensors[out_ids[0]]["kind"] = "OUTPUT"
        for i, t in enumerate(out_ids[1:]):
            builder.tensors[t]["kind"] = "KV_CACHE"
            builder.tensors[t]["name"] = "%s/present.%d" % (label, i)
            if i < len(past_ids):
                time_as_append(builder, past_ids[i], t)
        past, past_ids, spec = list(outs)[1:], out_ids[1:], holder["out_spec"]

    name = "%s-generate-%d-%d" % (a.model.split(":")[-1], prompt, new_tokens)
    return builder.schedule(name, "torch:%s --generate %s" % (a.model, a.generate), not a.no_repeat)
