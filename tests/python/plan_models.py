"""A model for the plan-path test, importable by `tierpool schedule from-torch --model
plan_models:mlp` (the test puts this folder on PYTHONPATH)."""

import torch


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.GELU(),
        torch.nn.Linear(512, 256), torch.nn.Tanh(),
        torch.nn.Linear(256, 10))
