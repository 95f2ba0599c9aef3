"""Bad input to the Python API gives a clear ValueError before any work (issue 12), and a
training run killed with SIGKILL at random points resumes bit-identically."""

import json
import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from _cli_helpers import exit_with_cli, run_cli

import irbm
from irbm import runs
from irbm.training import Trainer

DATA = (torch.rand(40, 6, generator=torch.Generator().manual_seed(0)) < 0.5).double()


@pytest.mark.parametrize("build, match", [
    (lambda: irbm.OrderedRBM(6, 3, beta=float("nan")), "beta"),
    (lambda: irbm.OrderedRBM(6, 3, beta=-3), "beta"),
    (lambda: irbm.InfiniteRBM(6, beta=float("inf")), "beta"),
    (lambda: irbm.RBM(6, 2.5), "n_hidden"),
    (lambda: Trainer(irbm.RBM(6, 3), batch_size=2.7), "batch_size"),
    (lambda: Trainer(irbm.RBM(6, 3), n_chains=0), "n_chains"),
    (lambda: Trainer(irbm.RBM(6, 3), epsilon=0), "epsilon"),
    (lambda: Trainer(irbm.RBM(6, 3), lr=float("inf")), "lr"),
    (lambda: Trainer(irbm.RBM(6, 3), progress=False).fit(DATA, 2.5), "epochs"),
    (lambda: Trainer(irbm.RBM(6, 3), progress=False).fit(DATA[:0], 2), "non-empty"),
    (lambda: Trainer(irbm.RBM(6, 3)).update(torch.full((4, 6), 0.5)), "binary"),
    (lambda: Trainer(irbm.RBM(6, 3)).update(torch.zeros(4, 7)), "shape"),
    (lambda: Trainer(irbm.RBM(6, 3), device="cuda" if not torch.cuda.is_available() else "meta"),
     "device"),
    # No random numbers on "meta": refused before the model is moved there (found on a GPU).
    (lambda: Trainer(irbm.RBM(6, 3), device="meta"), "device 'meta' is not usable"),
    # Found by an API review: each was silent, or Python's words from deep inside.
    (lambda: Trainer(irbm.RBM(6, 3), seed=None), "seed must be an integer >= 0, got None"),
    (lambda: irbm.evaluate.free_energies(irbm.RBM(6, 3), DATA, layer="bogus"),
     'layer must be "visible" or "hidden"'),
    (lambda: irbm.save(irbm.RBM(6, 3), "unused.safetensors", extra={"dtype": "float64"}),
     "extra may not hold dtype: the checkpoint's own fields"),
])
def test_bad_python_input_is_a_clear_value_error(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_a_which_typo_is_refused_not_taken_for_latest(tmp_path):
    """which="newest" loaded the latest model and an evaluation recorded it as "latest"."""
    trainer = Trainer(irbm.RBM(6, 3), progress=False)
    trainer.fit(DATA, 1, callbacks=[irbm.training.CheckpointEvery(tmp_path / "run")])
    assert irbm.runs.load_run_model(tmp_path / "run", which="latest").n_hidden == 3
    with pytest.raises(ValueError, match='which must be "best" or "latest", got \'newest\''):
        irbm.runs.load_run_model(tmp_path / "run", which="newest")


def test_a_runs_model_loads_in_another_dtype_as_irbm_load_does(tmp_path):
    """load_run_model had no dtype, which irbm.load has (an API review); the source's digest
    stays the saved model's, which the run's records name."""
    trainer = Trainer(irbm.RBM(6, 3), progress=False)
    trainer.fit(DATA, 1, callbacks=[irbm.training.CheckpointEvery(tmp_path / "run")])
    wide, source = irbm.runs.run_model(tmp_path / "run", which="latest", dtype="float64")
    saved, saved_source = irbm.runs.run_model(tmp_path / "run", which="latest")
    assert wide.dtype == torch.float64 and saved.dtype == torch.float32
    assert source.sha256 == saved_source.sha256
    torch.testing.assert_close(wide.W, saved.W.double())
    with pytest.raises(ValueError, match="dtype must be a torch floating-point dtype"):
        irbm.runs.load_run_model(tmp_path / "run", dtype="int8")


def test_seed_none_is_a_fresh_seed_for_tempering_and_the_floor():
    """It failed inside them (None + 1; manual_seed(None)), where the estimators of ln Z take
    None as a fresh random seed."""
    model = irbm.RBM(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    result = irbm.tempering.estimate_log_partition_tempering(
        model, n_temperatures=4, n_sweeps=20, n_ladders=4, n_groups=2, base="model", seed=None,
        progress=False)
    assert np.isfinite(result.log_z)
    floor = irbm.floor.sampled_log_partition_floor(model, DATA, n_chains=4, n_steps=3, seed=None)
    assert floor <= model.log_partition_exact() + 1e-9


def test_update_before_fit_and_uint8_batches_just_work():
    trainer = Trainer(irbm.RBM(6, 3), progress=False)
    trainer.update(DATA[:8].to(torch.uint8))
    assert trainer.state.updates == 1


def test_save_to_a_directory_names_the_fix(tmp_path):
    with pytest.raises(ValueError, match="model.safetensors"):
        irbm.save(irbm.RBM(6, 3), tmp_path)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_models_train_but_are_not_annealed(dtype):
    """float16 and bfloat16 models train, store and sample, but AIS and RAISE on them failed
    inside numpy's generator or torch's conversions: the estimators refuse them by name."""
    from irbm.evaluate import ais_nll, raise_nll
    model, rows = irbm.RBM(16, 4, dtype=dtype), torch.ones(3, 16, dtype=dtype)
    irbm.Trainer(model, batch_size=3, progress=False).fit(rows, 1)
    from irbm.evaluate import bracket_nll
    from irbm.tempering import estimate_log_partition_tempering
    for what, call in [("AIS", lambda: ais_nll(model, rows, n_chains=4, n_betas=4)),
                       ("RAISE", lambda: raise_nll(model, rows, n_betas=4)),
                       # a traceback from numpy's generator before (a walkthrough)
                       ("a bracket", lambda: bracket_nll(model, rows, base_data=rows)),
                       ("parallel tempering",
                        lambda: estimate_log_partition_tempering(model, 4, 10))]:
        with pytest.raises(ValueError, match=rf"{what} runs in float32 or float64, and this "
                                             rf"model is {dtype}: convert the model first"):
            call()
    # A float32 copy for the estimate is fine, by dtype or by its name; a half one is not.
    for name in (torch.float32, "float32"):
        assert ais_nll(model, rows.float(), n_chains=4, n_betas=4, dtype=name,
                       progress=False).log_partition.n_chains == 4
    with pytest.raises(ValueError, match=r"AIS runs in float32 or float64, and dtype= is "
                                         r"torch.float16: ask for torch.float32"):
        ais_nll(irbm.RBM(16, 4), rows.float(), n_chains=4, n_betas=4, dtype=torch.float16)


def test_an_unusable_device_is_named_by_the_estimators_and_the_trainer():
    from irbm.ais import estimate_log_partition
    from irbm.evaluate import raise_nll
    rows = torch.ones(3, 8)
    for call in (lambda: estimate_log_partition(irbm.RBM(8, 2), 4, 4, device="nonsense"),
                 lambda: raise_nll(irbm.RBM(8, 2), rows, n_betas=4, device="nonsense"),
                 lambda: irbm.Trainer(irbm.RBM(8, 2), device="nonsense")):
        with pytest.raises(ValueError, match="device 'nonsense' is not usable here"):
            call()
    # RAISE takes device and dtype as AIS does: on a copy, the model left as it was.
    model = irbm.RBM(8, 2)
    upper = raise_nll(model, rows, n_betas=8, seed=0, device="cpu", dtype="float64",
                      progress=False)
    same = raise_nll(model.to(torch.float64), rows, n_betas=8, seed=0, progress=False)
    assert upper.mean == pytest.approx(same.mean, abs=1e-12)


def test_callbacks_log_z_and_validation_are_checked_by_their_contracts(tmp_path):
    from irbm.evaluate import nll
    from irbm.runs import ValidateWithAIS
    model, rows = irbm.RBM(8, 2), torch.ones(3, 8)
    trainer = irbm.Trainer(model, progress=False)
    with pytest.raises(ValueError, match=r"callbacks must be a list of Callback objects or "
                                         r"functions f\(trainer, metrics\), got .*: wrap one"):
        trainer.fit(rows, 1, callbacks=lambda trainer, metrics: None)
    with pytest.raises(ValueError, match="is neither an irbm.training.Callback nor a function"):
        trainer.fit(rows, 1, callbacks=[object()])
    assert trainer.epoch == 0  # refused before any epoch
    with pytest.raises(ValueError, match=r"log_z must be a number or an AISResult, got '3'"):
        nll(model, rows, "3")
    assert nll(model, rows, np.float64(3.0)) == nll(model, rows, np.array(3.0)) == \
        nll(model, rows, torch.tensor(3.0)) == nll(model, rows, 3.0)
    for wrong in (True, np.bool_(True), np.array([3.0])):
        with pytest.raises(ValueError, match="log_z must be a number or an AISResult"):
            nll(model, rows, wrong)
    with pytest.raises(ValueError, match=r"every must be a whole number of epochs >= 1, got 0"):
        ValidateWithAIS(tmp_path, rows, 0)


def test_save_refuses_what_is_not_a_model_before_writing(tmp_path):
    from irbm.sklearn import BernoulliRBM
    for wrong, name in (({"a": 1}, "dict"), (BernoulliRBM(), "BernoulliRBM")):
        with pytest.raises(TypeError, match=rf"irbm.save takes an irbm model \(an EnergyModel\), "
                                            rf"got {name}; .*irbm.save\(estimator.to_model\(\)"):
            irbm.save(wrong, tmp_path / "model.safetensors")
    assert not any(tmp_path.iterdir())


def test_a_family_whose_config_leaves_out_an_option_is_not_saved(tmp_path):
    """A family's option missing from config() came back at its default after irbm.save and
    irbm.load, without a word (a walkthrough's family of its own)."""
    class Forgets(irbm.RBM):
        def __init__(self, n_visible, n_hidden=3, *, scale=1.0, dtype=torch.float32,
                     device=None, generator=None):
            super().__init__(n_visible, n_hidden, dtype=dtype, device=device,
                             generator=generator)
            self.scale = scale
    with pytest.raises(ValueError, match=r"Forgets.config\(\) leaves out its constructor "
                                         r"option scale: a saved model would load with the "
                                         r"default; return every option from config\(\) "
                                         r"\(\{\*\*super\(\)\.config\(\), 'scale': "
                                         r"self\.scale\}\)"):
        irbm.save(Forgets(5, scale=7.0), tmp_path / "model.safetensors")
    assert not any(tmp_path.iterdir())


def test_wrong_types_to_the_trainer_and_train_run_are_named(tmp_path):
    """A string learning rate failed in a comparison, a family name given as the model and a
    dict given as settings in attribute lookups (an audit of messages)."""
    from irbm.workflows import train_run
    with pytest.raises(TypeError, match=r"lr must be a number, got '0.1' \(a str\)"):
        irbm.Trainer(irbm.RBM(4, 2), lr="0.1")
    with pytest.raises(TypeError, match=r"Trainer takes a model .*, got str"):
        irbm.Trainer("irbm")
    with pytest.raises(TypeError, match=r"train_run takes a Settings .*, got dict"):
        train_run({"family": "rbm", "dataset": "digits"}, tmp_path / "run")
    assert not any(tmp_path.iterdir())


def test_a_checkpoint_from_a_newer_irbm_says_to_upgrade(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    path = tmp_path / "model.safetensors"
    irbm.save(irbm.RBM(6, 3), path)
    with safe_open(path, framework="pt") as reader:
        header = reader.metadata()
    save_file(load_file(path), path, metadata={**header, "version": "2"})
    with pytest.raises(ValueError, match=r"has checkpoint version 2, this irbm reads version 1: "
                                         r"it was written by a newer irbm; update this one"):
        irbm.load(path)


def test_float16_model_round_trips(tmp_path):
    model = irbm.RBM(6, 3, dtype=torch.float16)
    irbm.save(model, tmp_path / "half.safetensors")
    loaded = irbm.load(tmp_path / "half.safetensors")
    assert loaded.dtype == torch.float16
    assert torch.equal(loaded.filters(), model.filters())


# Each run is a process of its own, so that SIGKILL ends it wherever it is. They are forked from
# one server process that imported irbm and scikit-learn's digits once (multiprocessing's fork
# server): a start then takes milliseconds instead of the seconds of importing torch and
# scikit-learn afresh, five times.
_PROCESSES = multiprocessing.get_context("forkserver")


def _train(out: Path) -> multiprocessing.Process:
    """``irbm train orbm digits --out OUT ...`` started in a process of its own (its stderr in
    OUT.stderr)."""
    _PROCESSES.set_forkserver_preload(["_cli_helpers", "irbm.cli", "sklearn.datasets"])
    argv = ["train", "orbm", "digits", "--out", str(out), "--epochs", str(EPOCHS),
            "--n-hidden", "16", "--quiet", "--threads", "1"]
    process = _PROCESSES.Process(target=exit_with_cli, args=(argv, f"{out}.stderr"))
    process.start()
    return process


def _finish(process: multiprocessing.Process, out: Path):
    process.join()
    assert process.exitcode == 0, Path(f"{out}.stderr").read_text()


# The last kill waits for epoch 8; the epochs after it are the margin that keeps a slow poll or
# one long epoch on a busy machine from letting training end before the kill.
EPOCHS = 16


def _last_epoch(history: Path) -> tuple[int, float]:
    """(last epoch written, the shortest epoch's duration in seconds), (0, 0.0) before the
    first. The shortest, not the last: a first epoch slowed by a busy machine would put the
    kill several epochs later."""
    try:
        entries = json.loads(history.read_text())["history"]
    except (OSError, ValueError, KeyError):
        return 0, 0.0
    return (entries[-1]["epoch"], min(e["seconds"] for e in entries)) if entries else (0, 0.0)


def test_sigkill_at_random_points_resumes_bit_identically(tmp_path):
    reference = tmp_path / "reference"
    _finish(_train(reference), reference)
    killed, rng = tmp_path / "killed", random.Random(0)
    history = killed / "history.json"
    for kill in range(3):  # the k-th kill lands inside epoch 3k + 3 or so: never at the end
        process = _train(killed)
        deadline = time.monotonic() + 300
        while _last_epoch(history)[0] < 3 * kill + 2 and time.monotonic() < deadline:
            assert process.exitcode is None, Path(f"{killed}.stderr").read_text()
            time.sleep(0.01)
        if kill == 0:  # a second process training the same run is refused, nothing written
            before = json.loads(history.read_text())["history"]
            second = run_cli("train", "orbm", "digits", "--out", killed, "--epochs", EPOCHS,
                             "--n-hidden", 16, "--quiet", "--threads", 1)
            assert second.code == 2 and f"{killed} is in use by another process (pid " \
                f"{process.pid}, training this run): wait for it, or stop it" in second.err, \
                second.err
            # The first process may append an epoch meanwhile: compare epochs, not bytes.
            assert json.loads(history.read_text())["history"][:len(before)] == before
        time.sleep(rng.uniform(0.0, _last_epoch(history)[1]))  # a random point of an epoch
        assert process.exitcode is None, "training ended before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.join()
        assert process.exitcode == -signal.SIGKILL
    _finish(_train(killed), killed)  # the killed processes' locks held nothing back
    assert not (killed / runs.TRAIN_LOCK_FILE).exists()
    expected, actual = irbm.load(reference), irbm.load(killed)
    for name, tensor in expected.state_dict().items():
        assert torch.equal(actual.state_dict()[name], tensor), name


# 4 AIS chains keep it fast; their warning is checked once inside.
@pytest.mark.filterwarnings("ignore:ValidateWithAIS, epoch")
def test_training_callbacks_refuse_before_any_epoch_and_keep_an_earlier_run(tmp_path):
    """ValidateWithAIS checks its rows against the model and CheckpointEvery its period when
    the fit starts, not thousands of epochs later; a new trainer is refused a directory that
    holds another run's checkpoints or records (they would be overwritten without a word),
    while the run resumed from there goes on; a directory that does not exist yet is made."""
    import json

    from irbm.runs import ValidateWithAIS
    from irbm.training import CheckpointEvery
    rows = (torch.arange(48).reshape(6, 8) % 3 == 0).to(torch.float32)
    trainer = irbm.Trainer(irbm.RBM(8, 2), batch_size=3, progress=False)
    with pytest.raises(ValueError, match=r"every \(epochs\) must be an integer >= 1, got 0"):
        CheckpointEvery(tmp_path / "ck", every=0)
    for wrong, message in ((rows[:, :5], r"valid=\.\.\.\): visible input must have shape "
                                         r"\(N, 8\), got \(6, 5\)"),
                           (rows * 255, r"valid=\.\.\.\): visible input must be binary")):
        with pytest.raises(ValueError, match=message):
            trainer.fit(rows, 3, callbacks=[ValidateWithAIS(tmp_path / "v", wrong, 3)])
    assert trainer.epoch == 0 and not (tmp_path / "v").exists()

    run = tmp_path / "new" / "run"  # its parent does not exist either
    first = irbm.Trainer(irbm.RBM(8, 2), batch_size=3, progress=False)
    # 4 chains are too few to judge ln Z by: Python hears of it (the CLI says it in its line)
    unreliable = r"ValidateWithAIS, epoch 1: AIS effective sample size .* of 4 chains.*choice"
    with pytest.warns(UserWarning, match=unreliable + r" of the best model") as caught:
        first.fit(rows, 2, callbacks=[ValidateWithAIS(run, rows, 1, n_chains=4, n_betas=10)])
    # Raised inside fit's callback, named at the line that called fit (stacklevel=2 named irbm).
    assert {record.filename for record in caught} == {__file__}
    assert [record["epoch"] for record in json.loads((run / "validation.json").read_text())] \
        == [1, 2]
    callbacks = [CheckpointEvery(run), ValidateWithAIS(run, rows, 1, n_chains=4, n_betas=10)]
    first.fit(rows, 3, callbacks=callbacks)
    before = {path.name: path.read_bytes() for path in run.iterdir()}
    again = irbm.Trainer(irbm.RBM(8, 2), batch_size=3, progress=False)
    with pytest.raises(ValueError, match=r"already holds checkpoint.safetensors, "
                                         r"model.safetensors of another run, which this trainer "
                                         r"\(not resumed from there\) would overwrite: resume "
                                         r"that run with Trainer.from_checkpoint"):
        again.fit(rows, 2, callbacks=callbacks)
    with pytest.raises(ValueError, match=r"already holds validation.json, best.safetensors .*: "
                                         r"resume that run .*or delete those files first"):
        again.fit(rows, 2, callbacks=callbacks[1:])
    assert again.epoch == 0
    assert {path.name: path.read_bytes() for path in run.iterdir()} == before
    resumed = irbm.Trainer.from_checkpoint(run, progress=False)
    resumed.fit(rows, 4, callbacks=callbacks)
    assert resumed.epoch == 4
    # A checkpoint at epoch 0 (fit(rows, 0) saves one) is resumed, not refused as another run's;
    # so is a second fit of the trainer that wrote it.
    zero = tmp_path / "zero"
    started = irbm.Trainer(irbm.RBM(8, 2), batch_size=3, progress=False)
    started.fit(rows, 0, callbacks=[CheckpointEvery(zero)])
    started.fit(rows, 1, callbacks=[CheckpointEvery(zero)])
    at_zero = tmp_path / "at-zero"
    irbm.Trainer(irbm.RBM(8, 2), batch_size=3, progress=False).fit(
        rows, 0, callbacks=[CheckpointEvery(at_zero)])
    again = irbm.Trainer.from_checkpoint(at_zero, progress=False)
    assert again.epoch == 0
    again.fit(rows, 1, callbacks=[CheckpointEvery(at_zero)])
    assert again.epoch == started.epoch == 1
    # A trainer's own directories are its own, not every directory (a review's holes): one
    # trained in memory, or resumed from elsewhere, is refused another run's.
    before = {path.name: path.read_bytes() for path in run.iterdir()}
    for trainer in (started, again, irbm.Trainer.from_checkpoint(zero, progress=False)):
        with pytest.raises(ValueError, match="of another run"):
            trainer.fit(rows, 9, callbacks=[CheckpointEvery(run)])
    assert {path.name: path.read_bytes() for path in run.iterdir()} == before
    # Two callbacks on one directory, each finding none of its own files: the other's files
    # are still another run's (a claim made by the first let the second through; review).
    only_checkpoints, only_records = tmp_path / "ck-only", tmp_path / "records-only"
    irbm.Trainer(irbm.RBM(8, 2), batch_size=3, progress=False).fit(
        rows, 1, callbacks=[CheckpointEvery(only_checkpoints)])
    irbm.Trainer(irbm.RBM(8, 2), batch_size=3, progress=False).fit(
        rows, 1, callbacks=[ValidateWithAIS(only_records, rows, 1, n_chains=4, n_betas=10)])
    for directory in (only_checkpoints, only_records):
        for order in (1, -1):
            pair = [ValidateWithAIS(directory, rows, 1, n_chains=4, n_betas=10),
                    CheckpointEvery(directory)][::order]
            with pytest.raises(ValueError, match="of another run"):
                irbm.Trainer(irbm.RBM(8, 2), batch_size=3, progress=False).fit(
                    rows, 1, callbacks=pair)


def test_a_model_with_non_finite_parameters_is_refused_by_every_estimator_and_the_sampler():
    """AIS returned ln Z = nan with a warning about spread weights, a bracket failed on "betas
    contains NaN", exact ln Z returned nan and sampling drew normal-looking pictures (a
    walkthrough): each now names the parameter."""
    from irbm.evaluate import ais_nll, bracket_nll, raise_nll
    from irbm.sampling import sample
    from irbm.tempering import estimate_log_partition_tempering
    model, rows = irbm.RBM(6, 3, dtype=torch.float64), torch.ones(3, 6, dtype=torch.float64)
    with torch.no_grad():
        model.W[0, 0] = float("nan")
    for what, call in [("AIS", lambda: ais_nll(model, rows, n_chains=4, n_betas=4)),
                       ("RAISE", lambda: raise_nll(model, rows, n_betas=4)),
                       ("a bracket", lambda: bracket_nll(model, rows, base_data=rows)),
                       ("parallel tempering",
                        lambda: estimate_log_partition_tempering(model, 4, 10)),
                       ("exact log Z", model.log_partition_exact),
                       ("sampling", lambda: sample(model, 2, 3))]:
        with pytest.raises(ValueError, match=rf"^{what} needs finite parameters, and this "
                                             rf"model's W hold NaN or infinite values"):
            call()


def test_numpy_dtypes_are_taken_and_a_bracket_of_no_rows_is_refused_by_what_it_needs():
    """The scikit-learn side took np.float64 and the models refused it; a bracket of an empty
    array said "rows must lie in 2..0" (walkthroughs)."""
    from irbm.evaluate import bracket_nll
    assert irbm.RBM(4, 2, dtype=np.float64).dtype == torch.float64
    assert irbm.RBM(4, 2, dtype=np.dtype("float32")).dtype == torch.float32
    assert irbm.RBM(4, 2, dtype=float).dtype == irbm.RBM(4, 2, dtype="f8").dtype == torch.float64
    with pytest.raises(ValueError, match=r"floating-point dtype .*got 'float99'"):
        irbm.RBM(4, 2, dtype="float99")
    with pytest.raises(ValueError, match=r"floating-point dtype .*got <class 'numpy.int64'>"):
        irbm.RBM(4, 2, dtype=np.int64)
    with pytest.raises(ValueError, match=r"a bracket needs at least 2 rows of data"):
        bracket_nll(irbm.RBM(4, 2), torch.zeros(0, 4), base_data=None)


def test_an_int_where_a_generator_goes_is_named_with_the_fix():
    """AttributeError: 'int' object has no attribute 'device' (an API review)."""
    with pytest.raises(TypeError, match=r"generator must be a torch.Generator or None, got int "
                                        r"\(a seed: torch.Generator\(\).manual_seed\(seed\)\)"):
        irbm.RBM(6, 3, generator=0)
    with pytest.raises(TypeError, match=r"got int \(a seed is seed=\)"):
        irbm.ais.estimate_log_partition(irbm.RBM(6, 3), 4, 10, base="model", generator=3)
    seeded = irbm.RBM(6, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(seeded.W, irbm.RBM(6, 3).W)  # the default is seed 0
