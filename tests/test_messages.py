"""What irbm tells its user is true: the README's rules are the code's, messages are written
once and in good English."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from _cli_helpers import assert_ok, run_cli

from irbm.ais import AISResult
from irbm.datasets import load_user_data

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _flagged(n_chains: int, ess: float) -> bool:
    """Whether an AIS estimate of ``n_chains`` chains with effective sample size ``ess`` is
    flagged: ``ess`` chains of weight 1, the others of weight 0."""
    whole = int(ess)
    log_weights = torch.full((n_chains,), -torch.inf, dtype=torch.float64)
    log_weights[:whole] = 0.0
    estimate = AISResult(0.0, 0.0, 0.0, log_weights, torch.zeros(n_chains, 1), 10, "data", 0.0)
    return bool(estimate.reliability_warnings())


def test_the_readme_states_the_ais_flag_threshold_of_the_code():
    sentence = next(line for line in README.replace("\n", " ").split(". ")
                    if "flagged as unreliable" in line)
    assert "10%" in sentence and "30" in sentence, sentence
    assert "fewer than 30 chains" in README.replace("\n", " ")
    # The code: below 10% of the chains, or below 30 chains; fewer chains, always.
    assert _flagged(100, 20) and not _flagged(100, 30)
    assert _flagged(1000, 90) and not _flagged(1000, 100)
    assert _flagged(20, 19) and _flagged(20, 20)


def test_the_readme_says_how_a_users_file_is_split(tmp_path):
    np.save(tmp_path / "rows.npy", np.eye(50, 9, dtype=np.uint8))
    data = load_user_data(tmp_path / "rows.npy")
    assert (len(data.train), len(data.valid), len(data.test)) == (40, 5, 5)
    section = README[README.index("**Datasets.**"):][:2000]
    assert re.search(r"80% / 10% / 10%", section) and "seed 0" in section, section


def test_training_an_irbm_is_said_in_good_english(tmp_path):
    result = run_cli("train", "irbm", "digits", "--out", tmp_path / "run", "--epochs", 0)
    assert_ok(result)
    assert "training an iRBM on" in result.out
    assert " a irbm" not in result.out.lower() and " a rbm" not in result.out.lower()
