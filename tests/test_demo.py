"""`irbm.demo`'s side-by-side run: a worker's error and an error here are neither lost nor left
running (the whole demo runs end to end in test_cli.py)."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from irbm import demo

TINY = (1, 10, 10)  # epochs, AIS chains, temperatures


def test_a_workers_error_comes_with_its_messages_after_this_process_model(tmp_path):
    said = []
    jobs = [("rbm", {"n_hidden": 5, "lr": -1.0}, tmp_path / "bad", TINY, None),
            ("rbm", {"n_hidden": 5}, tmp_path / "good", TINY, None)]
    threads = torch.get_num_threads()
    with pytest.raises(ValueError, match="lr must be"):
        demo._run_side_by_side(jobs, 2, said.append)
    assert torch.get_num_threads() == threads
    text = "\n".join(said)
    # This process's model finished first, then the worker's block said what it was doing.
    assert text.index("test  NLL") < text.index(f"== rbm: training 1 epochs on digits -> "
                                                f"{tmp_path / 'bad'}")
    assert (tmp_path / "good" / "evaluation.json").is_file()
    assert not multiprocessing.active_children()


def test_an_error_here_stops_the_workers_at_once(tmp_path):
    jobs = [("irbm", {}, tmp_path / "long", (10_000, 10, 10), None),
            ("rbm", {"n_hidden": 0}, tmp_path / "bad", TINY, None)]
    with pytest.raises(ValueError, match="n_hidden"):
        demo._run_side_by_side(jobs, 2, lambda line: None)
    # Joined after a terminate: a 10,000-epoch worker left running would hang this test.
    assert not multiprocessing.active_children()


def test_an_out_holding_what_no_demo_wrote_is_refused_before_any_work(tmp_path):
    """A training run (or any folder of other files) as --out: the demo would write its
    models and report into it."""
    (tmp_path / "run").mkdir()
    for name in ("config.json", "irbm-run.json"):
        (tmp_path / "run" / name).write_text("{}")
    with pytest.raises(ValueError, match=r"--out .*run holds config.json, irbm-run.json, which "
                                         r"no demo wrote: the demo writes irbm, orbm, rbm, "
                                         r"report into it"):
        demo.demo(tmp_path / "run", quick=True)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.json",
                                                                    "irbm-run.json"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        demo.demo(tmp_path / "file", quick=True)
