"""scripts/z_profile.py: ln Z(z) of an ordered model on a grid of z, each entry checked here
against the exact ln Z of the RBM the model is with z fixed (few units: enumerable)."""

import json
import math

import pytest
import torch
from _cli_helpers import load_script

import irbm
from irbm.cli import main as cli_main


def _script():
    return load_script("z_profile")


def test_z_profile_tabulates_ln_z_of_each_z_against_the_exact_values(tmp_path):
    run = tmp_path / "orbm"
    assert cli_main(["train", "orbm", "digits", "--out", str(run), "--epochs", "2",
                     "--n-hidden", "6", "--lr", "0.05", "--quiet"]) == 0
    out = tmp_path / "profile"
    assert _script().main([str(run), "--z", "1,3,6", "--out", str(out), "--chains", "200",
                           "--betas", "300", "--rows", "20", "--seed", "2"]) == 0
    payload = json.loads(out.with_suffix(".json").read_text())
    model = irbm.load(run, dtype=torch.float64)
    assert [record["z"] for record in payload["profile"]] == [1, 3, 6]
    for record in payload["profile"]:
        rbm, log_factor = model.given_z(record["z"])
        exact = rbm.log_partition_exact() + log_factor
        assert record["ais_log_z"] == pytest.approx(exact, abs=0.1)
        assert record["raise_log_z"] == pytest.approx(exact, abs=0.3)
        assert f"| {record['z']} | {record['ais_log_z']:.2f} |" in \
            out.with_suffix(".md").read_text()
    assert 1 <= payload["test_mean_z"] <= 6 and math.isfinite(payload["test_mean_z"])


def test_z_profile_refuses_a_model_without_z(tmp_path):
    run = tmp_path / "rbm"
    assert cli_main(["train", "rbm", "digits", "--out", str(run), "--epochs", "1",
                     "--n-hidden", "4", "--quiet"]) == 0
    with pytest.raises(SystemExit, match="has no z"):
        _script().main([str(run), "--z", "1", "--out", str(tmp_path / "x")])
