"""The paper's figures from a CalTech101 iRBM run directory, into results/figures/.

    python scripts/caltech101_figures.py RUN_DIR [--out results/figures] [--steps 10000]

Filters (the first units, in the iRBM's coarse-to-fine order), samples after ``--steps`` Gibbs
steps from noise, P(z | v) for a noise image and test images, and the hidden layer's size over
training (from the run's history).
"""

import argparse
import json
from pathlib import Path

import torch

import irbm
from irbm._threads import hold_threads
from irbm.datasets import load_dataset
from irbm.plotting import plot_filters, plot_p_z_given_v, plot_samples, plot_size_history
from irbm.sampling import sample


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--out", type=Path, default=Path("results/figures"))
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    hold_threads(1)
    data = load_dataset("caltech101", data_dir=args.data_dir)
    model = irbm.load(args.run / "model.safetensors")
    args.out.mkdir(parents=True, exist_ok=True)
    shape, order = data.image_shape, data.pixel_order
    name = f"caltech101_{model.family}"
    plot_filters(model, shape, args.out / f"{name}_filters.png", order=order,
                 title=f"{model.display_name}: first 96 of {model.n_hidden} filters")
    chains = sample(model, 16, args.steps, generator=0, progress=False)
    plot_samples(chains.samples, shape, args.out / f"{name}_samples.png", order=order,
                 title=f"{args.steps} Gibbs steps from noise", one_means="background")
    generator = torch.Generator().manual_seed(0)
    noise = (torch.rand(1, model.n_visible, generator=generator) < 0.5).float()
    examples = torch.cat([noise, torch.as_tensor(data.test[:7]).float()])
    plot_p_z_given_v(model, examples, shape, args.out / f"{name}_p_z_given_v.png", order=order,
                     one_means="background")
    history = json.loads((args.run / "history.json").read_text())["history"]
    plot_size_history([h["epoch"] for h in history], [h["n_hidden"] for h in history],
                      args.out / f"{name}_hidden_size.png",
                      title=f"{model.display_name} hidden units during training")


if __name__ == "__main__":
    main()
