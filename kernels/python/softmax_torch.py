"""A PyTorch target in its plainest form: a function that returns a new tensor (cudafuzz copies
it onto the roster's output and judges it there)."""

import torch


def softmax(x):
    """softmax over the last axis."""
    return torch.softmax(x, dim=-1)
