"""tierpool for PyTorch: stream activations, optimizer states and KV-cache blocks through the
node's tierpoold.

    with tierpool.torch.offload_activations(client, min_bytes=1 << 20):
        loss = model(x)
    loss.backward()

    opt = tierpool.torch.offload_optimizer(torch.optim.Adam(model.parameters()), client)

    kv = tierpool.torch.KVBlockStore(client, "llama-7b", block_tokens=16)

    x = tierpool.torch.view_tensor(client, "weights")   # a CUDA tensor on the server's device hbm
"""

from ._device import view_tensor
from .activations import offload_activations
from .kv_blocks import KVBlockStore
from .optimizer import offload_optimizer
from .plans import ActivationPlan

__all__ = ["ActivationPlan", "offload_activations", "offload_optimizer", "KVBlockStore",
           "view_tensor"]
