"""tierpool.torch on a GPU whose memory is the server's hbm (tierpoold --hbm-device 0, the
package built with -DTIERPOOL_CUDA=ON): CUDA tensors go into the device arena and come back
without crossing the host in the client, the server moves them to dram and back on the copy
engines, and activation offload through it trains bit-identically. Skipped without a GPU or
without a CUDA build."""

import os

# Deterministic cuBLAS, so that two runs of the same steps can be compared bit for bit; set
# before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest  # noqa: E402
import torch  # noqa: E402

import tierpool  # noqa: E402
import tierpool.torch as tt  # noqa: E402
from conftest import start_server, stop_server, wait_for  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

HBM = 64 << 20


@pytest.fixture(scope="module")
def gpu_server():
    proc, sock = start_server("--hbm-device", "0", dram="1G", hbm="64M")
    with tierpool.Client(sock) as c:
        if c.hbm_device is None:
            stop_server(proc)
            pytest.skip("the server's hbm is not on the GPU (no CUDA build, or no device)")
    yield sock
    stop_server(proc)


@pytest.fixture
def client(gpu_server, request):
    with tierpool.Client(gpu_server, request.node.name[:60]) as c:
        yield c


def links(c):
    counters = c.stat()["counters"]
    return {k: v for k, v in counters.items() if k.startswith("link_") and k.endswith("_bytes")}


def moved(before, after, name):
    return after.get(name, 0) - before.get(name, 0)


def test_the_server_hbm_is_the_gpu(client):
    assert client.hbm_device == 0
    backends = {t["tier"]: t["backend"] for t in client.stat()["tiers"]}
    assert backends["hbm"] == "cuda:0"


def test_a_cuda_tensor_goes_into_device_memory_and_back_without_the_host(client):
    x = torch.randn(1 << 20, device="cuda")  # 4 MiB
    before = links(client)
    client.put("x", x, tier="hbm")
    assert client.stat("x").tier == tierpool.Tier.HBM
    assert client.stat("x").dtype == "float32"
    # Written by the GPU in place: nothing was copied up from dram.
    assert moved(before, links(client), "link_dram_hbm_bytes") == 0
    y = torch.empty_like(x)
    assert client.get_into("x", y, tier="hbm") == x.numel() * 4
    assert torch.equal(x, y)
    assert client.get("x") == x.cpu().numpy().tobytes()  # the host read of the same object


def test_view_tensor_shares_the_device_copy(client):
    x = torch.arange(3 * 1000, dtype=torch.bfloat16, device="cuda").view(3, 1000)
    client.put("v", x, tier="hbm")
    t = tt.view_tensor(client, "v")
    assert t.is_cuda and t.dtype == torch.bfloat16 and tuple(t.shape) == (3, 1000)
    assert torch.equal(t, x)
    assert client.stat("v").pins == 1  # the tensor holds the pin
    del t  # waits for the GPU, then releases the pin
    assert wait_for(lambda: client.stat("v").pins == 0)
    v = client.view("v", tier="hbm", device=True)
    assert isinstance(v, tierpool.DeviceView) and v.device == 0 and v.size == 6000
    v.verify()  # on the GPU
    v.release()


def test_a_device_reservation_written_by_torch(client):
    src = torch.randint(0, 255, (5 << 20,), dtype=torch.uint8, device="cuda")
    r = client.reserve("r", src.numel(), tier="hbm", device=True)
    assert r.device == 0 and r.buffer is None
    torch.as_tensor(r, device="cuda").copy_(src)
    torch.cuda.synchronize()
    r.commit()  # checksummed on the GPU
    assert client.get("r") == src.cpu().numpy().tobytes()


def test_objects_move_to_dram_and_back_on_the_copy_engines(client):
    xs = [torch.full((2 << 20,), float(i), device="cuda") for i in range(12)]  # 12 x 8 MiB
    before = links(client)
    for i, x in enumerate(xs):
        client.put("m%d" % i, x, tier="hbm")
    tiers = [client.stat("m%d" % i).tier for i in range(12)]
    assert tierpool.Tier.DRAM in tiers  # 96 MiB into 64 MiB: the oldest went down
    for i, x in enumerate(xs):
        y = torch.empty_like(x)
        client.get_into("m%d" % i, y, tier="hbm")
        assert torch.equal(x, y), i
    after = links(client)
    assert moved(before, after, "link_hbm_dram_bytes") > 0
    assert moved(before, after, "link_dram_hbm_bytes") > 0
    hbm = [t for t in client.stat()["tiers"] if t["tier"] == "hbm"][0]
    assert hbm["checksum_failures"] == 0


class Mlp(torch.nn.Module):
    def __init__(self, d=1024, layers=10):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x.square().mean()


def train(model, batches, acts=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for x in batches:
        if acts is not None:
            with acts:
                loss = model(x)
        else:
            loss = model(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def test_activation_offload_through_device_memory_trains_bit_identically(client):
    torch.use_deterministic_algorithms(True)
    try:
        torch.manual_seed(0)
        batches = [torch.randn(2048, 1024, device="cuda") for _ in range(3)]  # 8 MiB activations
        torch.manual_seed(1)
        ref = Mlp().cuda()
        off = Mlp().cuda()
        off.load_state_dict(ref.state_dict())
        want_losses, want_params = train(ref, batches)
        before = links(client)
        acts = tt.offload_activations(client, min_bytes=1 << 20)
        assert acts.hbm_device == 0
        got_losses, got_params = train(off, batches, acts)
        acts.flush()
        after = links(client)
    finally:
        torch.use_deterministic_algorithms(False)
    assert got_losses == want_losses
    for a, b in zip(got_params, want_params):
        assert torch.equal(a, b)
    # 11 saved tensors of 8 MiB a step (the batch, each ReLU's output) in 64 MiB of device hbm:
    # they went down and came back on the copy engines.
    assert acts.offloaded_bytes >= 3 * (HBM + (8 << 20))
    assert moved(before, after, "link_hbm_dram_bytes") > 0
    assert moved(before, after, "link_dram_hbm_bytes") > 0
    assert acts.fetched_bytes >= acts.offloaded_bytes
    hbm = [t for t in client.stat()["tiers"] if t["tier"] == "hbm"][0]
    assert hbm["checksum_failures"] == 0
