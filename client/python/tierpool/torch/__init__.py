"""tierpool for PyTorch: a training step's tensors held and moved by its plan, or activations,
optimizer states and KV-cache blocks streamed through the node's tierpoold one class at a time.

    job = tierpool.torch.offload(model, optimizer, client, budget="60%")
    for x, y in loader:                  # the loop as it was
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(job.report)                    # what the last step did
    job.close()

    with tierpool.torch.offload_activations(client, min_bytes=1 << 20):
        loss = model(x)
    loss.backward()

    opt = tierpool.torch.offload_optimizer(torch.optim.Adam(model.parameters()), client)

    kv = tierpool.torch.KVBlockStore(client, "llama-7b", block_tokens=16)

    x = tierpool.torch.view_tensor(client, "weights")   # a CUDA tensor on the server's device hbm
"""

from ._device import view_tensor
from ._step import OffloadJob, StepReport
from .activations import offload_activations
from .kv_blocks import KVBlockStore
from .optimizer import offload_optimizer
from .plans import ActivationPlan

__all__ = ["ActivationPlan", "OffloadJob", "StepReport", "offload", "offload_activations",
           "offload_optimizer", "KVBlockStore", "view_tensor"]


def offload(model, optimizer, client, budget="60%", **options):
    """Puts a training job's whole step under a plan within ``budget`` (a share of the step's
    no-offload peak, "60%" or 0.6, or bytes). The first step runs plainly and is recorded; the
    plan is made from it and registered, and from the second step on every parameter, gradient,
    optimizer state and saved activation of at least ``min_bytes`` lives in tierpool (views of
    its hbm copy while a step reads it) and moves as the plan says. The training loop stays as
    it is. Returns an ``OffloadJob``: ``job.report`` is the last step's ``StepReport``,
    ``job.close()`` brings everything back into the trainer's memory and ends the plan (a job
    that dies takes its objects with it).

    Options: ``device`` (a device profile for the planner: a name or a JSON file; default: the
    link measured through the server), ``min_bytes`` (64 KiB), ``prefix`` (of the job's keys),
    ``name``, ``keep_objects`` (leave the objects when the plan ends), ``at_least_floor``
    (raise a budget below the step's floor to it instead of refusing), ``workdir`` (where the
    schedule and plan are written and kept; default: a temporary directory removed by
    ``close()``), ``on_step`` (called with each ``StepReport``),
    ``recompute`` (a share of the step's compute, "5%" or 0.05: where moving saved activations
    would stall, the plan may make cheap ones again in backward instead, from their inputs'
    copies, with the same bytes; default 0)."""
    return OffloadJob(model, optimizer, client, budget, **options)
