"""Training data the tests share: noisy copies of a few random binary prototypes."""

import torch


def prototype_batches(n_batches=12, batch_size=16, n_visible=10):
    """Noisy copies of four random binary prototypes, in minibatches (N, n_visible) float64:
    structure for a model to learn, so that an iRBM trained on them grows (and with L1
    shrinks) within a dozen updates."""
    generator = torch.Generator().manual_seed(0)
    prototypes = (torch.rand(4, n_visible, generator=generator) < 0.5).double()
    rows = prototypes[torch.randint(0, 4, (n_batches * batch_size,), generator=generator)]
    noise = (torch.rand(rows.shape, generator=generator) < 0.05).double()
    return list(((rows + noise) % 2).split(batch_size))
