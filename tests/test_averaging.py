"""The running average of the parameters (``Trainer(average=H)``, ``irbm train --average H``):
its recursion by hand, through growth and pruning (units enter at 0 and leave with their rows),
bit-identical resume, and the averaged model written as a run directory of its own."""

import json

import numpy as np
import pytest
import torch
from _cli_helpers import assert_ok, run_cli
from _prototypes import prototype_batches

import irbm
from irbm import checkpoint as ckpt
from irbm import runs
from irbm.models import take_units
from irbm.training import AVERAGE_DIR, Callback, Trainer


class HandAverage(Callback):
    """theta_bar by its definition, from the parameters after each update: theta_bar = theta
    at the first, then theta_bar + (theta - theta_bar) / H; per-unit rows follow every hidden
    layout (new units at 0)."""

    def __init__(self, horizon):
        self.horizon, self.average, self.sizes = horizon, None, []

    def on_hidden_layout(self, trainer, index):
        if self.average is not None:
            for name, spec in trainer.model.parameter_specs.items():
                if spec.per_unit:
                    self.average[name] = take_units(self.average[name], index)

    def on_update_end(self, trainer, batch):
        parameters = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
        if self.average is None:
            self.average = parameters
        else:
            self.average = {name: mean + (parameters[name] - mean) / self.horizon
                            for name, mean in self.average.items()}
        self.sizes.append(trainer.model.n_hidden)


def _trainer(family, average, **options):
    model = irbm.build_model({"family": family, "n_visible": 10,
                              "n_hidden": 1 if family == "irbm" else 5}, dtype=torch.float64)
    return Trainer(model, cd_k=2, batch_size=16, lr=0.1, l1=0.2, seed=3, average=average,
                   progress=False, **options)


@pytest.mark.parametrize("family", ["rbm", "orbm", "irbm"])
def test_the_average_follows_its_definition_through_growth_and_pruning(family):
    trainer = _trainer(family, average=4)
    hand = HandAverage(4)
    trainer.callbacks.append(hand)
    for batch in prototype_batches():
        trainer.update(batch)
    if family == "irbm":  # the run both grows and shrinks
        sizes = hand.sizes
        assert max(sizes) > 1 and any(b < a for a, b in zip(sizes, sizes[1:])), sizes
    averaged = trainer.averaged_model()
    assert averaged is not trainer.model and averaged.n_hidden == trainer.model.n_hidden
    for name, parameter in averaged.named_parameters():
        torch.testing.assert_close(parameter.detach(), hand.average[name], rtol=1e-12,
                                   atol=1e-15)
    # ... and it is not the model itself: the last updates moved the parameters (L1 holds
    # some at exactly 0, where the average is 0 too).
    assert any(not torch.equal(parameter, getattr(trainer.model, name))
               for name, parameter in averaged.named_parameters())


def test_without_an_average_there_is_no_averaged_model():
    trainer = _trainer("rbm", average=0)
    trainer.update(prototype_batches()[0])
    assert trainer.averaged_model() is None and trainer.optimizer.averages == {}


def test_an_average_resumes_bit_identically(tmp_path):
    batches = prototype_batches()
    straight = _trainer("irbm", average=5)
    for batch in batches:
        straight.update(batch)
    first = _trainer("irbm", average=5)
    for batch in batches[:7]:
        first.update(batch)
    first.save_checkpoint(tmp_path / "state.safetensors")
    resumed = Trainer.from_checkpoint(tmp_path / "state.safetensors", progress=False)
    assert resumed.config.average == 5
    for batch in batches[7:]:
        resumed.update(batch)
    for name, parameter in straight.averaged_model().named_parameters():
        assert torch.equal(getattr(resumed.averaged_model(), name), parameter), name


def test_a_run_resumed_without_an_average_drops_it(tmp_path):
    """--average 0 on a forced resume: no frozen average is exported, or saved again."""
    trainer = _trainer("irbm", average=5)
    for batch in prototype_batches()[:6]:
        trainer.update(batch)
    trainer.save_checkpoint(tmp_path / "state.safetensors")
    resumed = Trainer.from_checkpoint(tmp_path / "state.safetensors", average=0, force=True,
                                      progress=False)
    resumed.update(prototype_batches()[6])
    assert resumed.averaged_model() is None
    resumed.save_checkpoint(tmp_path / "state.safetensors")
    tensors, _ = ckpt.read_checkpoint(tmp_path / "state.safetensors")
    assert not any(name.startswith("optimizer.average.") for name in tensors)


def test_the_average_of_a_float32_model_is_kept_in_float64():
    """Increments (theta - theta_bar) / H below half a float32 ulp of theta_bar would be lost."""
    model = irbm.RBM(10, 5)
    trainer = Trainer(model, cd_k=1, batch_size=16, average=100_000, progress=False)
    for batch in prototype_batches()[:3]:
        trainer.update(batch.float())
    assert {mean.dtype for mean in trainer.optimizer.averages.values()} == {torch.float64}
    assert trainer.averaged_model().W.dtype == torch.float32


def test_a_checkpoint_with_float32_averages_resumes(tmp_path):
    """The first builds saved a float32 model's averages in float32; they resume in float64."""
    trainer = Trainer(irbm.RBM(10, 5), cd_k=1, batch_size=16, average=10, progress=False)
    for batch in prototype_batches()[:3]:
        trainer.update(batch.float())
    path = tmp_path / "state.safetensors"
    trainer.save_checkpoint(path)
    tensors, metadata = ckpt.read_checkpoint(path)
    ckpt.write_checkpoint(path, {name: tensor.float() if name.startswith("optimizer.average.")
                                 else tensor for name, tensor in tensors.items()}, metadata)
    resumed = Trainer.from_checkpoint(path, progress=False)
    resumed.update(prototype_batches()[3].float())
    assert {mean.dtype for mean in resumed.optimizer.averages.values()} == {torch.float64}


@pytest.mark.parametrize("average", [-1, 1.5, True, "3"])
def test_a_bad_horizon_is_a_clear_error(average):
    with pytest.raises(ValueError, match="average must be an integer >= 0"):
        _trainer("rbm", average=average)


def test_the_cli_writes_the_averaged_model_as_a_run_directory(tmp_path):
    rows = tmp_path / "rows.npy"
    np.save(rows, (np.random.default_rng(0).random((200, 12)) < 0.3).astype(np.float32))
    run = tmp_path / "run"
    assert_ok(run_cli("train", "irbm", rows, "--out", run, "--average", 8, "--epochs", 2,
                      "--l1", "0.01", "--valid-size", 20, "--test-size", 20, "--quiet"))
    average = run / AVERAGE_DIR
    model, raw = irbm.load(average), irbm.load(run)
    assert ckpt.read_checkpoint(average / ckpt.MODEL_FILE)[1]["averaged"] is True
    assert model.n_hidden == raw.n_hidden and not torch.equal(model.W, raw.W)
    state = Trainer.from_checkpoint(run, progress=False)
    for name, parameter in state.averaged_model().named_parameters():
        assert torch.equal(getattr(model, name), parameter), name
    # The run's marker and settings, not its history (measured on the raw parameters).
    assert sorted(p.name for p in average.iterdir()) == ["config.json", "irbm-run.json",
                                                         "model.safetensors"]
    # The records beside it make it a run that every command takes.
    assert_ok(run_cli("evaluate", average, "--latest", "--chains", 5, "--betas", 10))
    assert (average / "evaluation.json").is_file() and not (run / "evaluation.json").exists()


def test_eval_every_with_average_selects_among_the_averaged_models_too(tmp_path):
    """The paper's selection among the models this project reports: --eval-every validated
    the raw parameters only, and RUN/average/ had no best model (a walkthrough)."""
    rows = tmp_path / "rows.npy"
    np.save(rows, (np.random.default_rng(0).random((200, 12)) < 0.3).astype(np.float32))
    run = tmp_path / "run"
    command = ["train", "irbm", rows, "--out", run, "--average", 8, "--l1", "0.01",
               "--valid-size", 20, "--test-size", 20, "--eval-every", 1, "--eval-chains", 10,
               "--eval-betas", 20]
    trained = run_cli(*command, "--epochs", 2)
    assert_ok(trained)
    average = run / AVERAGE_DIR
    records = json.loads((average / "validation.json").read_text())
    assert [record["epoch"] for record in records] == [1, 2]
    assert trained.out.count("AIS (average): ln Z = ") == 2, trained.out
    history = json.loads((run / "history.json").read_text())["history"]
    assert [row["average_valid_nll"] for row in history] == \
        [record["valid_nll"] for record in records]
    # The raw model's validation is unchanged beside it, and differs from the average's.
    raw = json.loads((run / "validation.json").read_text())
    assert [record["valid_nll"] for record in raw] == [row["valid_nll"] for row in history]
    assert raw[-1]["valid_nll"] != records[-1]["valid_nll"]
    best = min(records, key=lambda record: record["valid_nll"])
    tensors, metadata = ckpt.read_checkpoint(average / runs.BEST_FILE)
    assert metadata["epoch"] == best["epoch"] and metadata["averaged"] is True
    if best["epoch"] == 2:  # the latest average is the model written beside it
        latest, _ = ckpt.read_checkpoint(average / ckpt.MODEL_FILE)
        assert all(torch.equal(tensors[name], latest[name]) for name in latest)
    # A resumed run owns its average's records (they are its own) and goes on validating.
    resumed = run_cli(*command, "--epochs", 3)
    assert_ok(resumed)
    assert [r["epoch"] for r in json.loads((average / "validation.json").read_text())] == \
        [1, 2, 3]
    assert "never validated" not in resumed.out
    # A run trained before the averaged models were validated is told its best is of part of
    # it (a review).
    (average / "validation.json").unlink()
    (average / runs.BEST_FILE).unlink()
    resumed = run_cli(*command, "--epochs", 4)
    assert_ok(resumed)
    assert f"note: the averaged models before epoch 4 were never validated (the irbm that " \
        f"trained them validated the raw model alone): {average / runs.BEST_FILE} will be " \
        "the best of those validated from here on" in resumed.out, resumed.out
    # Evaluation of RUN/average takes its best model by default.
    evaluated = run_cli("evaluate", average, "--chains", 5, "--betas", 10)
    assert_ok(evaluated)
    assert f"{average / runs.BEST_FILE} (epoch " in evaluated.out, evaluated.out


def test_validating_an_average_nobody_keeps_records_nothing(tmp_path):
    """A trainer without ``average`` has no averaged model: the callback waits for one."""
    from irbm.runs import ValidateWithAIS
    rows = torch.cat(prototype_batches()[:2]).double()
    trainer = _trainer("rbm", 0)
    trainer.fit(rows, 1, callbacks=[ValidateWithAIS(tmp_path / "average", rows, 1,
                                                    n_chains=4, n_betas=10, averaged=True)])
    assert not (tmp_path / "average" / "validation.json").exists()
    assert "average_valid_nll" not in trainer.history[-1]


def test_the_averaged_best_is_the_best_epochs_average_not_the_latest(tmp_path, monkeypatch):
    """Validation NLL fell at every epoch of the test above, so keeping the latest average
    would have passed it (a review): here epoch 2 of 3 is the best."""
    from irbm import runs as runs_module
    from irbm.runs import ValidateWithAIS
    scores = iter([(5.0, 0.1), (3.0, 0.1), (4.0, 0.1)])
    monkeypatch.setattr(runs_module, "nll", lambda model, rows, log_z: next(scores))
    rows = torch.cat(prototype_batches()[:2]).double()
    trainer = _trainer("rbm", 3)
    averages = {}

    class Keep(Callback):
        def on_epoch_end(self, trainer, metrics):
            averages[trainer.epoch] = trainer.averaged_model().state_dict()

    trainer.fit(rows, 3, callbacks=[Keep(), ValidateWithAIS(tmp_path / "average", rows, 1,
                                                           n_chains=4, n_betas=10,
                                                           averaged=True, warn=False)])
    tensors, metadata = ckpt.read_checkpoint(tmp_path / "average" / runs.BEST_FILE)
    assert metadata["epoch"] == 2 and metadata["averaged"] is True
    best = {name.removeprefix("model."): value for name, value in tensors.items()}
    assert all(torch.equal(best[name], value) for name, value in averages[2].items())
    assert not all(torch.equal(best[name], value) for name, value in averages[3].items())


def test_a_validation_ln_z_below_the_certain_floor_is_replaced_by_it(tmp_path, monkeypatch):
    """The model selection during training took AIS's ln Z as it came: 11.7 nats below the
    certain floor in a walkthrough, a validation NLL (and a best model) that much too good.
    It now checks the floor as `irbm evaluate` does, and says so."""
    from irbm.evaluate import nll
    from irbm.floor import sampled_log_partition_floor
    real = runs.estimate_log_partition

    def too_low(*args, **kwargs):
        result = real(*args, **kwargs)
        for name in ("log_z", "log_z_low", "log_z_high"):
            setattr(result, name, getattr(result, name) - 50.0)
        return result

    monkeypatch.setattr(runs, "estimate_log_partition", too_low)
    rows = torch.cat(prototype_batches()[:2]).double()
    lines = []
    trainer = irbm.Trainer(irbm.RBM(rows.shape[1], 4, dtype=torch.float64), cd_k=1,
                           batch_size=16, progress=False)
    trainer.fit(rows, 1, callbacks=[runs.ValidateWithAIS(tmp_path, rows, 1, n_chains=10,
                                                         n_betas=20, echo=lines.append)])
    (record,) = runs.read_json(tmp_path / runs.VALIDATION_FILE)
    floor = sampled_log_partition_floor(trainer.model, rows, n_chains=10, n_steps=1, seed=0)
    assert record["log_z_floor"] == pytest.approx(floor)
    assert record["nll_log_z"] == record["log_z_floor"] > record["log_z_high"]
    assert record["valid_nll"] == pytest.approx(nll(trainer.model, rows, floor)[0])
    assert f"ln Z-hat {record['log_z']:.3f} lies below the certain floor {floor:.3f}" in lines[-1]
    # The history holds both, and the command line's epoch lines (written from the history)
    # say it as the callback's own echo does.
    (entry,) = trainer.history
    assert entry["log_z_floor"] == record["log_z_floor"] and entry["nll_log_z"] == floor
    assert runs._validation_line(entry, []).endswith(
        f"lies below the certain floor {floor:.3f}, which ln Z cannot: the NLL uses the floor")
    # Any floor above the point estimate is used, within AIS's own error bars too, as
    # `irbm evaluate` does.
    monkeypatch.setattr(runs, "sampled_log_partition_floor",
                        lambda *args, **kwargs: seen[-1] + 1e-3)
    seen = []
    monkeypatch.setattr(runs, "estimate_log_partition",
                        lambda *a, **k: seen.append((result := real(*a, **k)).log_z) or result)
    with pytest.warns(UserWarning) as caught:  # no echo: a warning says it
        trainer.fit(rows, 2, callbacks=[runs.ValidateWithAIS(tmp_path / "again", rows, 1,
                                                             n_chains=10, n_betas=20)])
    assert any("lies below the certain floor" in str(warning.message) and
               "the NLL uses the floor" in str(warning.message) for warning in caught)
    (record,) = runs.read_json(tmp_path / "again" / runs.VALIDATION_FILE)
    assert record["nll_log_z"] == pytest.approx(seen[-1] + 1e-3)
    assert record["nll_log_z"] < record["log_z_high"]
