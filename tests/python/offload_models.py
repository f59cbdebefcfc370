"""The four models tierpool.torch.offload is checked on (tests/python/test_torch_offload.py)
and measured with (benchmarks/python_offload_bench.py): an MLP, ResNet-18, a transformer
encoder trained with Adam, and a language model whose embedding is tied to its output layer
and whose one block runs twice. ``scale`` grows them from the test's sizes to the
benchmark's."""

import torch


class Encoder(torch.nn.Module):
    def __init__(self, vocab, d, layers):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)))


class TiedLM(torch.nn.Module):
    """Its embedding is its output layer's weight, and one block runs twice."""

    def __init__(self, vocab, d):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.block = torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d),
                                         torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        self.out = torch.nn.Linear(d, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x):
        h = self.embed(x)
        h = h + self.block(h)
        h = h + self.block(h)
        return self.out(h)


def _gen(i):
    return torch.Generator().manual_seed(1000 + i)


class Case:
    """One model: ``build()`` (seeded), ``batch(i)``, ``optimizer(params)``, ``loss(out, y)``."""

    def __init__(self, name, build, batch, optimizer):
        self.name, self.build, self.batch, self.optimizer = name, build, batch, optimizer

    def loss(self, out, y):
        if out.dim() == 3:
            return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        return torch.nn.functional.cross_entropy(out, y)


def cases(scale=1):
    """The four models; scale 1 is the test's size (a fraction of a second to a second and a
    half a step on two cores), larger ones the benchmark's."""
    import torchvision

    width, depth, rows = 128 * scale, 8, 8192

    def mlp():
        torch.manual_seed(0)
        acts = [torch.nn.ReLU, torch.nn.GELU, torch.nn.Tanh]
        layers = [torch.nn.Linear(width, width)]
        for i in range(depth - 1):
            layers += [acts[i % 3](), torch.nn.Linear(width, width)]
        return torch.nn.Sequential(*layers, torch.nn.ReLU(), torch.nn.Linear(width, 10))

    def mlp_batch(i):
        g = _gen(i)
        return torch.randn(rows, width, generator=g), torch.randint(0, 10, (rows,), generator=g)

    side = 32 * scale

    def resnet():
        torch.manual_seed(0)
        return torchvision.models.resnet18(num_classes=10)

    def resnet_batch(i):
        g = _gen(i)
        return (torch.randn(16, 3, side, side, generator=g),
                torch.randint(0, 10, (16,), generator=g))

    def tokens(vocab, n, seq):
        def batch_of(i):
            g = _gen(i)
            return (torch.randint(0, vocab, (n, seq), generator=g),
                    torch.randint(0, vocab, (n, seq), generator=g))
        return batch_of

    d = 64 * scale

    def encoder():
        torch.manual_seed(0)
        return Encoder(1000, d, 6)

    vocab, dt = 512 * scale, 256 * scale

    def tied():
        torch.manual_seed(0)
        return TiedLM(vocab, dt)

    sgd = lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)  # noqa: E731
    return [
        Case("mlp", mlp, mlp_batch, sgd),
        Case("resnet18", resnet, resnet_batch, sgd),
        Case("encoder", encoder, tokens(1000, 8, 64 * scale),
             lambda p: torch.optim.Adam(p, lr=1e-3)),
        Case("tied", tied, tokens(vocab, 16, 128),
             lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01)),
    ]
