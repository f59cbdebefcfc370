from typing import Any, Optional, Sequence, Union

import torch

from .. import Client, Plan

import os

class ActivationPlan:
    keys: list[str]
    sizes: Optional[list[int]]
    steps: Optional[list[tuple[int, int]]]
    def __init__(self, keys: Sequence[str], sizes: Optional[Sequence[int]] = ...,
                 steps: Optional[Sequence[tuple[int, int]]] = ...) -> None: ...
    def __len__(self) -> int: ...
    @classmethod
    def from_schedule(cls, schedule: Union[str, bytes, os.PathLike, dict], *,
                      min_bytes: int = ...) -> "ActivationPlan": ...

class offload_activations:
    hbm_device: Optional[int]
    offloaded_bytes: int
    fetched_bytes: int
    unplanned: int
    layout: Optional[ActivationPlan]
    def __init__(self, client: Client, min_bytes: int = ..., plan: Optional[Plan] = ..., *,
                 schedule: Union[str, bytes, os.PathLike, dict, ActivationPlan, None] = ...,
                 plan_keys: Optional[Sequence[str]] = ...,
                 plan_steps: Optional[Sequence[tuple[int, int]]] = ...,
                 prefix: Optional[str] = ..., prefetch_bytes: int = ...,
                 inflight_bytes: int = ..., durability: str = ...,
                 device_hbm: bool = ...) -> None: ...
    def __enter__(self) -> "offload_activations": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def flush(self) -> None: ...

def offload_optimizer(optimizer: torch.optim.Optimizer, client: Client, *,
                      prefix: Optional[str] = ..., min_bytes: int = ...,
                      chunk_bytes: int = ...) -> torch.optim.Optimizer: ...

class KVBlockStore:
    client: Client
    model_id: str
    block_tokens: int
    def __init__(self, client: Client, model_id: str, block_tokens: int, *,
                 durability: str = ..., tier: Optional[str] = ...) -> None: ...
    def block_keys(self, token_ids: Union[Sequence[int], torch.Tensor]) -> list[str]: ...
    def put_blocks(self, token_ids: Union[Sequence[int], torch.Tensor],
                   blocks: Union[Sequence[torch.Tensor], torch.Tensor]) -> int: ...
    def lookup(self, token_ids: Union[Sequence[int], torch.Tensor]) -> int: ...
    def get_blocks(self, token_ids: Union[Sequence[int], torch.Tensor],
                   out: Union[Sequence[torch.Tensor], torch.Tensor]) -> int: ...

def view_tensor(client: Client, key: str, *, dtype: Optional[torch.dtype] = ...,
                shape: Optional[Sequence[int]] = ...) -> torch.Tensor: ...

class StepReport:
    iteration: int
    seconds: float
    budget: int
    hbm_budget: int
    no_offload_peak: int
    hbm_peak: int
    outside_peak: int
    issued: int
    skipped: int
    skipped_absent: int
    skipped_in_place: int
    skipped_dead: int
    cancelled: int
    failed: int
    waited_for_room: int
    hits: int
    late: int
    late_wait_us: int
    misses: int
    bytes_in: int
    bytes_out: int
    link_in: int
    link_out: int
    recomputed: int
    recomputed_late: int
    reads_below_hbm: int
    unplanned: int
    diverged: str
    @property
    def working_set(self) -> int: ...
    @property
    def actions(self) -> int: ...
    @property
    def carried_out(self) -> float: ...

class OffloadJob:
    prefix: str
    workdir: str
    budget: int
    hbm_budget: int
    no_offload_peak: int
    floor: tuple[int, int]
    report: Optional[StepReport]
    reports: list[StepReport]
    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = ...,
                        error_if_nonfinite: bool = ...) -> torch.Tensor: ...
    def close(self) -> None: ...
    def __enter__(self) -> "OffloadJob": ...
    def __exit__(self, *exc: Any) -> bool: ...

def offload(model: torch.nn.Module, optimizer: torch.optim.Optimizer, client: Client,
            budget: Union[str, float, int] = ..., *, device: Optional[str] = ...,
            min_bytes: int = ..., prefix: Optional[str] = ..., name: Optional[str] = ...,
            keep_objects: bool = ..., at_least_floor: bool = ..., workdir: Optional[str] = ...,
            on_step: Optional[Any] = ...,
            recompute: Union[str, float] = ...) -> OffloadJob: ...
