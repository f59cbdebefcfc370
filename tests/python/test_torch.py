"""tierpool.torch: activation and optimizer offload give bit-identical training, free the
trainer's memory, and KV blocks round-trip with the right prefix hits."""

import os
import subprocess
import sys

import pytest
import torch

import tierpool
import tierpool.torch as tt


class TinyGPT(torch.nn.Module):
    def __init__(self, vocab=97, d=64, heads=4, layers=2, ctx=32):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(ctx, d) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(d, vocab)
        self.mask = torch.nn.Transformer.generate_square_subsequent_mask(ctx)

    def forward(self, x):
        h = self.tok(x) + self.pos[: x.shape[1]]
        return self.head(self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]]))


def run_steps(opt, acts, batches, forward):
    """Training steps: forward(batch) -> loss (under ``acts`` when given), backward, step.
    Returns the losses."""
    losses = []
    for batch in batches:
        if acts is not None:
            with acts:
                loss = forward(batch)
        else:
            loss = forward(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if acts is not None:
        acts.flush()
    return losses


def train(client, steps, offload_acts, offload_opt, seed=0):
    torch.manual_seed(seed)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if offload_opt:
        tt.offload_optimizer(opt, client, chunk_bytes=16 << 10)
    acts = tt.offload_activations(client, min_bytes=1024) if offload_acts else None
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 97, (4, 32), generator=g),
                torch.randint(0, 97, (4, 32), generator=g)) for _ in range(steps)]

    def forward(batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(model(x).reshape(-1, 97), y.reshape(-1))
    losses = run_steps(opt, acts, batches, forward)
    return losses, [p.detach().clone() for p in model.parameters()], acts, opt


@pytest.mark.parametrize("offload_acts,offload_opt", [(True, False), (False, True), (True, True)])
def test_offload_is_bit_identical(client, offload_acts, offload_opt):
    torch.set_num_threads(1)
    base_losses, base_params, _, base_opt = train(client, 6, False, False)
    losses, params, acts, opt = train(client, 6, offload_acts, offload_opt)
    assert losses == base_losses
    for a, b in zip(params, base_params):
        assert torch.equal(a, b)
    if offload_acts:
        assert acts.offloaded_bytes > 0 and acts.fetched_bytes >= acts.offloaded_bytes
        assert wait_empty(client, "act/")
    if offload_opt:
        assert opt.tierpool.offloaded_bytes > 0
        # Between steps the states (all but those under min_bytes) are placeholders; state_dict()
        # reads them back, equal.
        in_memory = [t for s in opt.state.values() for t in s.values()]
        assert all(t.numel() * t.element_size() < 4096 for t in in_memory)
        assert sum(t.numel() == 0 for t in in_memory) >= 2 * 6  # the big weights' two states
        sd, base_sd = opt.state_dict(), base_opt.state_dict()
        for k, s in base_sd["state"].items():
            for name, t in s.items():
                assert torch.equal(sd["state"][k][name], t), (k, name)


def wait_empty(client, prefix):
    from conftest import wait_for
    return wait_for(lambda: not client.list(prefix))


def test_activations_with_views_and_nonconiguous_saved_tensors(client):
    # A transposed activation is saved by matmul's backward: it must come back with its values.
    torch.manual_seed(0)
    a = torch.randn(64, 128, requires_grad=True)
    w = torch.randn(64, 256, requires_grad=True)

    def f():
        h = torch.relu(a * 2)        # saved: non-leaf, contiguous
        return (h.t() @ w).sum()     # saved: h.t() (a transposed view)

    f().backward()
    ga, gw = a.grad.clone(), w.grad.clone()
    a.grad = w.grad = None
    with tt.offload_activations(client, min_bytes=0) as acts:
        loss = f()
    loss.backward()
    assert acts.offloaded_bytes >= 64 * 128 * 4
    assert torch.equal(a.grad, ga) and torch.equal(w.grad, gw)


# The trainer's own (anonymous) resident memory, sampled every millisecond: tierpoold's shared
# pages that the client maps and writes are the server's memory, not the trainer's.
TRAINER = r"""
import sys, threading, time, torch, tierpool, tierpool.torch as tt

def anon_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])

peak = [0]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anon_kib())
        time.sleep(0.001)

mode, sock = sys.argv[1], sys.argv[2]
client = tierpool.Client(sock, "memory")
layers = [torch.nn.Linear(128, 128) for _ in range(16)]
model = torch.nn.Sequential(*[m for l in layers for m in (l, torch.nn.ReLU())])
x = torch.randn(16384, 128)  # 8 MiB activations, little compute
base = anon_kib()
sampler = threading.Thread(target=sample)
sampler.start()
if mode == "offload":
    with tt.offload_activations(client, min_bytes=1 << 20, inflight_bytes=16 << 20,
                                prefetch_bytes=16 << 20) as acts:
        out = model(x)
else:
    out = model(x)
out.sum().backward()
done.set()
sampler.join()
print(peak[0] - base, acts.offloaded_bytes if mode == "offload" else 0)
"""


@pytest.fixture(scope="module")
def big_server():
    from conftest import start_server, stop_server
    proc, sock = start_server(dram="512M")
    yield sock
    stop_server(proc)


def test_offload_lowers_the_trainers_peak_memory(big_server):
    server = big_server

    def run(mode):
        # A fixed mmap threshold: glibc's moving one keeps freed 8 MiB blocks in the heap, and
        # resident memory would stop following live tensors.
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 20))
        p = subprocess.run([sys.executable, "-c", TRAINER, mode, server], capture_output=True,
                           text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        grew_kib, offloaded = map(int, p.stdout.split())
        return grew_kib * 1024, offloaded

    plain, _ = run("plain")
    offload, offloaded = run("offload")
    # 16 saved 8 MiB tensors: each ReLU's output (also the next Linear's input, stored once)
    # and the first Linear's input
    assert offloaded >= 120 << 20
    saved = plain - offload
    print("peak growth: plain %d MiB, offload %d MiB, offloaded %d MiB"
          % (plain >> 20, offload >> 20, offloaded >> 20))
    assert saved >= 0.6 * offloaded, (plain, offload, offloaded)


def test_kv_blocks_round_trip_and_prefix_hits(client):
    kv = tt.KVBlockStore(client, "tiny-model", block_tokens=4)
    tokens = list(range(100, 118))  # 4 full blocks and 2 tokens over
    blocks = torch.randn(4, 2, 4, 8)
    assert kv.put_blocks(tokens, blocks) == 4
    assert kv.lookup(tokens) == 16
    assert kv.lookup(tokens[:9]) == 8
    assert kv.lookup([1] + tokens[1:]) == 0          # another first block: no hit at all
    assert kv.lookup(tokens[:12] + [0, 0, 0, 0]) == 12  # diverges in block 3
    assert kv.lookup(tokens[:3]) == 0
    out = torch.zeros(4, 2, 4, 8)
    assert kv.get_blocks(tokens[:12] + [7, 7, 7, 7], out) == 3
    assert torch.equal(out[:3], blocks[:3]) and torch.equal(out[3], torch.zeros(2, 4, 8))
    assert kv.get_blocks(tokens, list(out.unbind(0))) == 4
    assert torch.equal(out, blocks)
    assert tt.KVBlockStore(client, "other-model", 4).lookup(tokens) == 0
    info = client.stat(kv.block_keys(tokens)[0])
    assert info.kind == tierpool.Kind.KV_BLOCK and info.durability == tierpool.Durability.CACHE
    with pytest.raises(ValueError):
        kv.put_blocks(tokens[:4], torch.randn(2, 2, 4, 8))
    with pytest.raises(ValueError):
        tt.KVBlockStore(client, "m", 0)


# ---- the plan path: a schedule from `tierpool schedule from-torch` of the same model ----

HERE = os.path.dirname(os.path.abspath(__file__))
MLP_INPUT = (2048, 256)  # activations of 2-4 MiB against 2 MiB of weights


@pytest.fixture(scope="module")
def mlp_plan(tmp_path_factory):
    tool = os.environ.get("TIERPOOL_TOOL")
    if not tool:
        pytest.skip("TIERPOOL_TOOL is not set (run through ctest)")
    d = tmp_path_factory.mktemp("plan")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    sched, sched_json, plan = d / "mlp.pb", d / "mlp.json", d / "mlp-plan.pb"
    subprocess.run([tool, "schedule", "from-torch", "--model", "plan_models:mlp", "--input",
                    "%dx%d" % MLP_INPUT, "--optimizer", "sgd", "-o", str(sched), "--json",
                    str(sched_json)], check=True, env=env, capture_output=True, timeout=300)
    subprocess.run([tool, "plan", str(sched), "--device", "h100", "--hbm", "60%", "-o", str(plan)],
                   check=True, capture_output=True, timeout=120)
    return sched, sched_json, plan


def train_mlp(client, steps, plan=None, schedule=None, offload=True):
    sys.path.insert(0, HERE)
    import plan_models
    model = plan_models.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(3)
    acts = tt.offload_activations(client, min_bytes=1 << 20, plan=plan, schedule=schedule,
                                  prefetch_bytes=0) if offload else None
    batches = [torch.randn(*MLP_INPUT, generator=g) for _ in range(steps)]
    return run_steps(opt, acts, batches, lambda x: model(x).sum()), acts


def test_activation_plan_matches_what_autograd_saves(mlp_plan):
    layout = tt.ActivationPlan.from_schedule(mlp_plan[1], min_bytes=1 << 20)
    # The input and the outputs of ReLU, the second Linear (GELU's input), GELU and Tanh.
    assert layout.keys == ["input0", "relu", "addmm_1", "gelu", "tanh"]
    assert layout.sizes == [2 << 20, 4 << 20, 4 << 20, 4 << 20, 2 << 20]
    assert all(save < use for save, use in layout.steps)
    assert [use for _, use in layout.steps] == sorted(
        (use for _, use in layout.steps), reverse=True)  # backward reads them in reverse
    with pytest.raises(ValueError, match="SAVED_ACTIVATION"):
        tt.ActivationPlan.from_schedule({"tensors": []})
    with pytest.raises(TypeError):
        tt.ActivationPlan.from_schedule(42)


def test_plan_progress_brings_activations_up_before_backward(client, mlp_plan):
    """With the plan's schedule each saved tensor starts in hbm, each save and use reports
    progress, and the server's executor offloads and prefetches them so that backward's reads
    find them in hbm (hits). The same plan without progress reports moves nothing. Either way
    the losses are those of plain training."""
    sched, sched_json, plan_pb = mlp_plan
    plain, _ = train_mlp(client, 3, offload=False)

    def job_counters(job_id):
        jobs = [j for j in client.stat()["jobs"] if j["id"] == job_id]
        assert len(jobs) == 1
        return jobs[0]["counters"]

    results = {}
    for report in (False, True):
        with client.register_plan(str(sched), str(plan_pb)) as plan:
            layout = tt.ActivationPlan.from_schedule(str(sched_json), min_bytes=1 << 20)
            if not report:
                layout.steps = None  # the plan's keys, no progress reports
            losses, acts = train_mlp(client, 3, plan=plan, schedule=layout)
            assert losses == plain
            assert acts.unplanned == 0
            results[report] = job_counters(plan.job_id)
        assert client.list("") == []  # every offloaded tensor deleted once backward freed it
    quiet, planned = results[False], results[True]
    assert quiet["actions_issued"] == 0 and quiet["hits"] == 0, quiet
    # Reads of the 5 planned tensors (two read twice) in 3 iterations: all in hbm, or on their
    # way (a read can overtake the one-way progress report that issues its prefetch).
    assert planned["hits"] > 0 and planned["bytes_in"] > 0 and planned["bytes_out"] > 0, planned
    assert planned["hits"] + planned["late"] >= 0.8 * (planned["hits"] + planned["late"] +
                                                       planned["misses"]), planned
    assert planned["failed"] == 0, planned


def test_a_plan_registered_below_its_floor_is_refused_with_the_floor_named(client, mlp_plan):
    sched, _, plan_pb = mlp_plan
    with pytest.raises(tierpool.InvalidArgument) as e:
        client.register_plan(str(sched), str(plan_pb), hbm_budget_bytes=1 << 12)
    assert "below this schedule's floor of" in str(e.value) and "MiB" in str(e.value), e.value
    assert "step " in str(e.value)
    assert client.stat()["jobs"] == []


def test_without_a_gpu_hbm_tensors_go_through_host_memory(client):
    acts = tt.offload_activations(client)
    assert acts.hbm_device is None  # every saved tensor is put from host memory, as before
    client.put("w", torch.arange(4.0))
    with pytest.raises(tierpool.FailedPrecondition, match="hbm-device"):
        tt.view_tensor(client, "w")
