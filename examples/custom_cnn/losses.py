"""A loss of one's own, used by import path: `--loss examples.custom_cnn.losses:label_smoothing`.

A loss takes the network's logits (batch, classes) and the integer targets (batch,) and returns a scalar tensor.
It is what training minimises and what the §3.1 gradient statistics differentiate; validation and test accuracy
stay top-1.
"""
from __future__ import annotations

import torch

SMOOTHING = 0.1


def label_smoothing(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against targets smoothed towards the uniform distribution (Szegedy et al. 2016):
    (1 - s) * -log p[target] + s * mean over classes of -log p."""
    log_p = torch.log_softmax(logits.float(), dim=-1)
    nll = -log_p.gather(-1, targets[:, None]).squeeze(-1)
    return ((1 - SMOOTHING) * nll - SMOOTHING * log_p.mean(-1)).mean()
