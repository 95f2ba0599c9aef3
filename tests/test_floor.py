"""The certain floor of ln Z: sums of exp(-F) over distinct visible vectors and of exp(-G) over
distinct hidden vectors, against exact enumeration."""

import numpy as np
import pytest
import torch
from _deep_mode import deep_mode_model

import irbm
from irbm import floor
from irbm.models import binary_configurations

# 20 visible units (a million vectors, too many for 500 chains x 200 steps to cover) and 4
# hidden ones (16 vectors, every one of which the chains draw).
MODELS = {
    "rbm": lambda: irbm.RBM(20, 4, dtype=torch.float64),
    "orbm": lambda: irbm.OrderedRBM(20, 4, beta=1.2, dtype=torch.float64),
    "irbm": lambda: irbm.InfiniteRBM(20, n_hidden=4, beta=1.3, dtype=torch.float64),
}


def randomized(name, scale=0.3):
    model = MODELS[name]()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(scale * torch.randn(parameter.shape, generator=generator,
                                                dtype=torch.float64))
    return model


@pytest.mark.parametrize("name", MODELS)
def test_the_hidden_sum_reaches_the_exact_log_partition_the_visible_one_cannot(name):
    model = randomized(name)
    exact = model.log_partition_exact()
    data = torch.zeros(3, 20, dtype=torch.float64)
    data[1, :10] = data[2, 10:] = 1
    sampled = floor.sampled_log_partition_floor(model, data, n_chains=500, n_steps=200)
    assert sampled <= exact + 1e-9
    assert exact - sampled < 1e-9  # every hidden vector drawn, each counted once
    # The visible states those chains visit hold a small share of the mass.
    visible = floor._DistinctSum(model, "visible", 4096)
    generator = torch.Generator().manual_seed(0)
    chains = data[torch.arange(500) % 3]
    with torch.no_grad():
        for _ in range(200):
            chains, _ = model.gibbs_step(chains, generator)
            visible.add(chains)
    assert visible.log_sum < exact - 1.0


def test_distinct_rows_are_counted_once_across_and_within_batches():
    model = randomized("orbm")
    every_h = next(binary_configurations(4, torch.float64))
    generator = torch.Generator().manual_seed(1)
    batches = [every_h[torch.randint(0, 16, (40,), generator=generator)] for _ in range(5)]
    total = floor._DistinctSum(model, "hidden", 7)
    for batch in batches:
        total.add(batch)
        total.add(batch)
    distinct = torch.unique(torch.cat(batches), dim=0)
    expected = floor.log_partition_floor(floor.free_energies(model, distinct, layer="hidden"))
    assert total.log_sum == pytest.approx(expected, abs=1e-12)
    assert len(total.seen) == distinct.shape[0] < 16 * 5


@pytest.mark.parametrize("width", [1, 7, 64, 65, 784, 2000])
def test_row_hashes_are_equal_for_equal_rows_and_differ_for_every_one_bit_change(width):
    generator = torch.Generator().manual_seed(width)
    rows = (torch.rand(10, width, generator=generator) < 0.3).to(torch.uint8)
    flipped = rows.repeat(width, 1)  # row r with bit j flipped, for every r and j
    flipped[torch.arange(flipped.shape[0]), torch.arange(width).repeat_interleave(10)] ^= 1
    every = torch.cat([rows, flipped, rows])  # the rows twice: equal rows, equal hashes
    hashes = floor._row_hashes(every)
    assert hashes.dtype == np.uint64 and hashes.shape == (every.shape[0],)
    assert np.array_equal(floor._row_hashes(rows.double()), hashes[:10])  # any dtype
    by_row = dict(zip((row.tobytes() for row in every.numpy()), hashes.tolist()))
    assert len(set(by_row.values())) == len(by_row)  # distinct rows: distinct hashes
    assert [by_row[row.tobytes()] for row in every.numpy()] == hashes.tolist()


def test_row_hashes_depend_on_where_each_word_lies():
    """Rows made of the same 64-bit words in another order (every two of four words swapped)
    hash differently."""
    generator = torch.Generator().manual_seed(0)
    words = (torch.rand(50, 4, 64, generator=generator) < 0.5).to(torch.uint8)
    orders = [[0, 1, 2, 3], [1, 0, 2, 3], [0, 2, 1, 3], [3, 1, 2, 0], [0, 1, 3, 2]]
    rows = torch.cat([words[:, order].reshape(50, 256) for order in orders])
    assert np.unique(floor._row_hashes(rows)).size == torch.unique(rows, dim=0).shape[0]


def test_free_energies_of_the_hidden_layer_check_the_width():
    with pytest.raises(ValueError, match=r"shape \(N, 4\)"):
        floor.free_energies(randomized("rbm"), torch.zeros(0, 4), layer="hidden")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layer", ["visible", "hidden"])
def test_the_sums_are_taken_in_float64_whatever_the_models_dtype(dtype, layer):
    """A floor is certain only if its F and G are not rounded down: they are computed by a
    float64 copy of the model (in bfloat16 G is off by 1e-2 nats on this 301-unit oRBM, and
    unit indices past 256 round)."""
    model = irbm.OrderedRBM(10, 301, beta=1.01, dtype=torch.float64)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator,
                                        dtype=torch.float64))
        model.b.sub_(6.0)
    low = model.to(dtype)
    reference = low.as_float64()  # the low-precision parameters, exactly, in float64
    width = 301 if layer == "hidden" else 10
    rows = (torch.rand(50, width, generator=generator) < 0.1).to(dtype)
    if layer == "hidden":
        rows[0, 256] = 1  # an index bfloat16 cannot hold: 257 rounds to 256
    total = floor._DistinctSum(low, layer, 4096)
    total.add(rows)
    distinct = torch.unique(rows.double(), dim=0)
    expected = floor.log_partition_floor(floor.free_energies(reference, distinct, layer=layer))
    assert total.log_sum == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("family", ["rbm", "orbm", "irbm"])
def test_at_full_size_the_floor_stays_below_the_exact_log_partition_and_can_reach_it(family):
    """784 x 500 block-diagonal models (`irbm.models.block_diagonal`, whose exact ln Z is
    written from the definitions, not through the families' code), float32: with weights of
    trained magnitude the floor is far below ln Z but never above it; with weak weights and
    hidden units almost always off, the few hidden vectors the chains draw hold nearly all the
    mass, so the floor comes within 0.1 nat of ln Z, which the 784 nearly independent visible
    units could never give."""
    from irbm.models import block_diagonal
    options = {} if family == "rbm" else {"beta": 1.01}
    data = (torch.rand(20, 784, generator=torch.Generator().manual_seed(1)) < 0.5).float()
    for weight_std, hidden_bias_mean, within in ((2.5, -2.0, None), (0.3, -9.0, 0.1)):
        # Blocks of 12 visible units: 4,096 states each to enumerate for the exact ln Z,
        # against 65,536 at the default 16 (which took 4 of this test's 6 s).
        model, exact = block_diagonal(family, 784, 500, block_size=12, weight_std=weight_std,
                                      hidden_bias_mean=hidden_bias_mean, **options)
        sampled = floor.sampled_log_partition_floor(model, data, n_chains=100, n_steps=50,
                                                    descents=10)
        assert sampled <= exact + 1e-6
        if within is not None:
            assert exact - sampled < within


@pytest.mark.parametrize("name", MODELS)
def test_descents_find_a_deep_mode_the_chains_from_the_data_never_reach(name):
    """`deep_mode_model`: chains from zero rows stay near h = 0, descents end in the deep mode;
    with it and its single flips the floor comes within 0.3 nat of the exact ln Z and never
    above it."""
    model = deep_mode_model(name)
    exact = model.log_partition_exact()
    data = torch.zeros(3, 20, dtype=torch.float64)
    chains = floor.sampled_log_partition_floor(model, data, n_chains=100, n_steps=100)
    descended = floor.sampled_log_partition_floor(model, data, n_chains=100, n_steps=100,
                                                  descents=50)
    assert chains < exact - 5.0
    assert exact - 0.3 < descended <= exact + 1e-9
    with pytest.raises(ValueError, match="descents"):
        floor.sampled_log_partition_floor(model, data, descents=-1)


@pytest.mark.parametrize("values", [3, 7, 12, 10**6])
def test_single_flips_are_every_row_at_distance_one_in_blocks_of_bounded_size(values,
                                                                              monkeypatch):
    """Blocks hold at most NEIGHBOUR_VALUES values (a block may split one row's flips, and
    holds one row when a row is wider than that) and together every single flip, once."""
    monkeypatch.setattr(floor, "NEIGHBOUR_VALUES", values)
    rows = (torch.rand(4, 5, generator=torch.Generator().manual_seed(2)) < 0.5).double()
    blocks = list(floor._single_flips(rows))
    assert all(block.numel() <= max(values, 5) for block in blocks)
    flips = torch.cat(blocks)
    expected = torch.cat([torch.where(torch.eye(5, dtype=torch.bool), 1 - row, row)
                          for row in rows])
    assert torch.equal(flips, expected)
