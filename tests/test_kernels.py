"""The Philox stream and the fused sampling kernels (`irbm.kernels`), checked from first
principles: a pure-Python Philox4x32-10 against Random123's known answers and the library's
stream layout; the kernels' Bernoulli and ordered-hidden draws against exact distributions and
against the uniforms they consume; whole models' fused Gibbs steps against the eager path draw
for draw; independence from the thread count; and bit-identical resumed training with the
Philox stream (a checkpoint from before the option resumes with a torch.Generator)."""

import json
import multiprocessing

import numpy as np
import pytest
import torch
from _prototypes import prototype_batches
from scipy import stats

import irbm
from irbm import checkpoint as ckpt
from irbm import kernels
from irbm.kernels import (
    PhiloxGenerator,
    bernoulli_from_logits,
    blocks_per_row,
    compiled_available,
    ordered_hidden,
    usable,
)
from irbm.kernels.philox import philox_words
from irbm.training import Trainer

M32 = 0xFFFFFFFF
needs_kernels = pytest.mark.skipif(not compiled_available(),
                                   reason="numba missing or IRBM_KERNELS=off")
DTYPES = [torch.float32, torch.float64]
FAMILIES = ["rbm", "orbm", "irbm"]
# A key with both words' high bits set, and a block past 2^32 (the counter's high word).
HIGH_KEY = (0x9ABCDEF1, 0xF0E1D2C3)
HIGH_BLOCK = 2**33 + 5


# ---------------------------------------------------------------------------- references
def philox_reference(counter, key):
    """Philox4x32-10 on Python integers, as Random123's philox.h defines it: 10 rounds of
    (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0) with (hi0, lo0) = M0 c0 and (hi1, lo1) = M1 c2,
    the key bumped by the Weyl constants between rounds."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
    return c0, c1, c2, c3


def block_words(block, key):
    """The stream's block ``block``: Philox of the counter (low, high, 0, 0)."""
    return philox_reference((block & M32, block >> 32, 0, 0), key)


def expected_uniforms(key, first, n_rows, n_columns, dtype):
    """The documented layout: row r from block first + r ceil(D / 4), words in order;
    float32 = (word >> 8) 2^-24, float64 = word 2^-32."""
    per_row = -(-n_columns // 4)
    rows = []
    for row in range(n_rows):
        words = [w for b in range(per_row) for w in block_words(first + row * per_row + b, key)]
        rows.append(words[:n_columns])
    words = torch.tensor(rows, dtype=torch.int64)
    if dtype == torch.float32:  # < 2^24 integers times a power of two: exact either way
        return ((words >> 8).double() * 2.0**-24).float()
    return words.double() * 2.0**-32


def generator_at(key, position):
    """A PhiloxGenerator with ``key`` whose next block is ``position``."""
    generator = PhiloxGenerator(key[0] | key[1] << 32)
    generator.take(position, 4)  # position blocks of one row each
    assert generator.get_state().tolist() == [*key, position]
    return generator


def copy_of(generator):
    return PhiloxGenerator(0).set_state(generator.get_state())


def bits(tensor):
    """The raw bits of a float tensor, for bit-for-bit comparisons."""
    return tensor.view(torch.int32 if tensor.dtype == torch.float32 else torch.int64)


def softplus64(x):
    """softplus in float64 without torch's linear cut-off at 20 (off by up to e^-20)."""
    x = x.double()
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def exact_columns(preactivation, penalties, log_tail):
    """log w_z = sum_{i <= z} softplus(a_i) - penalty_i (z = 1..K), then the tail column
    log w_K + log_tail when there is a tail; float64."""
    columns = torch.cumsum(softplus64(preactivation) - penalties.double(), -1)
    if log_tail is not None:
        columns = torch.cat([columns, columns[..., -1:] + float(log_tail)], -1)
    return columns


def binomial_z(successes, trials, probability):
    """(successes - n p) / sqrt(n p (1 - p)), elementwise."""
    trials = torch.as_tensor(trials, dtype=torch.float64)
    probability = torch.as_tensor(probability, dtype=torch.float64)
    return (successes - trials * probability) / torch.sqrt(trials * probability * (1 - probability))


def chi_square_p(counts, probabilities):
    """p-value of Pearson's chi-square of ``counts`` against ``probabilities``; categories whose
    expected count is below 5 are pooled into one."""
    counts = np.asarray(counts, dtype=float)
    expected = np.asarray(probabilities, dtype=float) * counts.sum()
    small = expected < 5
    observed = np.append(counts[~small], counts[small].sum())
    expected = np.append(expected[~small], expected[small].sum())
    if expected[-1] == 0:
        assert observed[-1] == 0, "draws in categories of zero probability"
        observed, expected = observed[:-1], expected[:-1]
    statistic = ((observed - expected) ** 2 / expected).sum()
    return stats.chi2.sf(statistic, len(expected) - 1)


# ---------------------------------------------------------------------------- Philox stream
RANDOM123_KNOWN_ANSWERS = [  # Random123's kat_vectors for philox4x32_10
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter,key,expected", RANDOM123_KNOWN_ANSWERS)
def test_the_reference_philox_gives_random123s_known_answers(counter, key, expected):
    assert philox_reference(counter, key) == expected


def test_the_library_gives_the_known_answer_of_counter_0_key_0():
    words = philox_words(torch.tensor([0]), (0, 0))
    assert words.tolist() == [[0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]]
    generator = PhiloxGenerator(0)
    expected = [w * 2.0**-32 for w in (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)]
    assert generator.uniform((1, 4), torch.float64).tolist() == [expected]
    assert PhiloxGenerator(0).uniform((1, 4), torch.float32).tolist() == \
        [[(w >> 8) * 2.0**-24 for w in (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)]]


@pytest.mark.parametrize("key", [(0, 0), (M32, M32), (0x80000000, 1), HIGH_KEY])
def test_philox_words_match_the_reference(key):
    counters = [0, 1, 7, M32, 2**32, 2**32 + 3, HIGH_BLOCK, 2**40 + 12345, 2**62 + 7]
    words = philox_words(torch.tensor(counters, dtype=torch.int64), key)
    assert words.dtype == torch.int64 and words.shape == (len(counters), 4)
    assert words.tolist() == [list(block_words(c, key)) for c in counters]


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, 2**32, 0xDEADBEEF12345678, 2**64 - 1])
def test_the_seed_is_the_key_and_the_stream_starts_at_block_0(seed):
    state = PhiloxGenerator(seed).get_state()
    assert state.dtype == torch.int64 and state.shape == (3,)
    assert state.tolist() == [seed & M32, seed >> 32, 0]
    assert PhiloxGenerator(np.int64(7)).get_state().tolist() == [7, 0, 0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_columns", [1, 3, 4, 5, 7, 8, 9])
def test_the_torch_uniforms_follow_the_documented_layout(dtype, n_columns):
    generator = generator_at(HIGH_KEY, HIGH_BLOCK)
    draws = generator.uniform((3, n_columns), dtype)
    assert draws.dtype == dtype and draws.shape == (3, n_columns)
    assert torch.equal(bits(draws),
                       bits(expected_uniforms(HIGH_KEY, HIGH_BLOCK, 3, n_columns, dtype)))
    assert generator.get_state()[2] == HIGH_BLOCK + 3 * blocks_per_row(n_columns)
    assert bool(((draws >= 0) & (draws < 1)).all())


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_one_dimensional_draw_is_one_column(dtype):
    generator, twin = generator_at(HIGH_KEY, 11), generator_at(HIGH_KEY, 11)
    draws = generator.uniform((6,), dtype)
    assert draws.shape == (6,)
    assert torch.equal(bits(draws), bits(twin.uniform((6, 1), dtype)[:, 0]))
    assert torch.equal(generator.get_state(), twin.get_state())
    assert generator.get_state()[2] == 17


def test_take_reserves_whole_blocks_per_row():
    generator = generator_at(HIGH_KEY, 5)
    assert generator.take(3, 5) == 5  # 3 rows of 2 blocks
    assert generator.take(2, 1) == 11
    assert generator.take(1, 8) == 13
    assert generator.get_state()[2] == 15
    assert [blocks_per_row(d) for d in (1, 3, 4, 5, 8, 9)] == [1, 1, 1, 2, 2, 3]


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_columns", [1, 3, 5, 7, 8, 12])
@pytest.mark.parametrize("first,key", [(0, (0, 0)), (13, (M32, 0x80000000)),
                                       (HIGH_BLOCK, HIGH_KEY)])
def test_the_compiled_uniforms_equal_the_torch_reference_bit_for_bit(dtype, n_columns, first,
                                                                     key):
    from irbm.kernels import _compiled
    n_rows, per_row = 5, blocks_per_row(n_columns)
    out = np.full((n_rows, 4 * per_row), np.nan, dtype=torch.empty(0, dtype=dtype).numpy().dtype)
    _compiled.uniforms(out, first, *key)
    reference = generator_at(key, first).uniform((n_rows, n_columns), dtype)
    assert torch.equal(bits(torch.from_numpy(out[:, :n_columns])), bits(reference))
    # The padding words of a row's last block are that block's other words.
    assert torch.equal(bits(torch.from_numpy(out)),
                       bits(expected_uniforms(key, first, n_rows, 4 * per_row, dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_columns", [1, 5, 8])
def test_rows_are_independent_of_each_other(dtype, n_columns):
    """Row r of an (N, D) draw is a (1, D) draw from block first + r ceil(D / 4); consecutive
    draws concatenate."""
    first, n_rows = 21, 6
    whole = generator_at(HIGH_KEY, first).uniform((n_rows, n_columns), dtype)
    for row in range(n_rows):
        alone = generator_at(HIGH_KEY, first + row * blocks_per_row(n_columns))
        assert torch.equal(bits(alone.uniform((1, n_columns), dtype)[0]), bits(whole[row]))
    split = generator_at(HIGH_KEY, first)
    parts = [split.uniform((2, n_columns), dtype), split.uniform((4, n_columns), dtype)]
    assert torch.equal(bits(torch.cat(parts)), bits(whole))


def test_get_and_set_state_round_trip():
    generator = PhiloxGenerator(2**40 + 3)
    generator.uniform((5, 3))
    state = generator.get_state()
    assert state.tolist() == [3, 2**8, 5]
    ahead = generator.uniform((4, 6), torch.float64)
    state_after = generator.get_state()
    state[2] = 0  # get_state returns a copy
    assert torch.equal(generator.get_state(), state_after)
    state[2] = 5
    other = PhiloxGenerator(99)
    assert other.set_state(state) is other
    assert torch.equal(other.uniform((4, 6), torch.float64), ahead)
    assert torch.equal(other.get_state(), state_after)
    assert torch.equal(generator.set_state(state).uniform((4, 6), torch.float64), ahead)
    assert generator.manual_seed(2**40 + 3).get_state().tolist() == [3, 2**8, 0]


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, 2.0, True, "1", None, float("nan")])
def test_bad_seeds_raise_value_error(seed):
    with pytest.raises(ValueError, match="seed"):
        PhiloxGenerator(seed)


@pytest.mark.parametrize("state", [
    torch.tensor([0, 0]), torch.tensor([0, 0, 0, 0]), torch.tensor([[0, 0, 0]]),
    torch.tensor([0.0, 0.0, 0.0]), torch.tensor([0, 0, 0], dtype=torch.int32),
    torch.tensor([-1, 0, 0]), torch.tensor([0, 2**32, 0]), torch.tensor([2**32, 0, 0]),
    torch.tensor([0, 0, -5]),
], ids=["short", "long", "2d", "float", "int32", "negative key", "key high word too big",
        "key low word too big", "negative position"])
def test_bad_states_raise_value_error_and_leave_the_generator_alone(state):
    generator = PhiloxGenerator(12345)
    generator.uniform((2, 3))
    before = generator.get_state()
    with pytest.raises(ValueError):
        generator.set_state(state)
    assert torch.equal(generator.get_state(), before)


# ---------------------------------------------------------------------------- Bernoulli kernel
def _logits(n_rows, n_columns, dtype, seed, extremes):
    generator = torch.Generator().manual_seed(seed)
    logits = 4.0 * torch.randn(n_rows, n_columns, generator=generator, dtype=torch.float64)
    logits[0, : len(extremes)] = torch.tensor(extremes, dtype=torch.float64)
    return logits.to(dtype)


@needs_kernels
@pytest.mark.parametrize("dtype,extremes", [
    (torch.float64, [0.0, 20.0, -20.0, 40.0, -40.0, 88.0, -88.0, 100.0, -100.0, 1e3, -1e3]),
    (torch.float32, [0.0, 20.0, -20.0, 40.0, -40.0, 80.0, -80.0, 1e3]),
])
@pytest.mark.parametrize("n_columns", [1, 37])
def test_bernoulli_is_the_streams_uniform_below_the_sigmoid(dtype, extremes, n_columns):
    logits = _logits(1200 if n_columns == 1 else 400, n_columns, dtype, 3, extremes[:n_columns])
    generator = generator_at(HIGH_KEY, 9)
    reference_generator = copy_of(generator)
    sample = bernoulli_from_logits(logits, generator)
    expected = (reference_generator.uniform(logits.shape, dtype) <
                torch.sigmoid(logits.double()).to(dtype)).to(dtype)
    assert sample.dtype == dtype and sample.shape == logits.shape
    assert torch.equal(generator.get_state(), reference_generator.get_state())
    assert bool(((sample == 0) | (sample == 1)).all())
    mismatches = int((sample != expected).sum())
    if dtype == torch.float64:
        assert mismatches == 0
    else:
        assert mismatches <= 1e-4 * logits.numel(), mismatches


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
def test_bernoulli_frequencies_match_the_sigmoid(dtype):
    column_logits = torch.tensor([-4.0, -2.0, -1.0, -0.3, 0.0, 0.5, 1.5, 3.0])
    n_rows = 5000
    logits = column_logits.to(dtype).repeat(n_rows, 1)
    sample = bernoulli_from_logits(logits, PhiloxGenerator(2024))
    probabilities = torch.sigmoid(column_logits.double())
    z = binomial_z(sample.double().sum(0), n_rows, probabilities)
    assert float(z.abs().max()) < 4.5, z
    # Each column's 2-category chi-square, summed: chi-square with 8 degrees of freedom.
    statistic = float((z**2).sum())
    assert stats.chi2.sf(statistic, len(column_logits)) > 1e-5, statistic
    # The same seed repeats the draws; another seed does not.
    again = bernoulli_from_logits(logits, PhiloxGenerator(2024))
    assert torch.equal(again, sample)
    assert not torch.equal(bernoulli_from_logits(logits, PhiloxGenerator(2025)), sample)


@needs_kernels
def test_float32_bernoulli_of_very_negative_logits_is_zero():
    # exp(100) must saturate, not overflow into the sign bit (a bug the first kernel had).
    logits = torch.full((8, 8), -100.0)
    assert float(bernoulli_from_logits(logits, PhiloxGenerator(1)).sum()) == 0.0


@needs_kernels
def test_float32_ordered_hidden_units_with_very_negative_preactivations_are_zero():
    preactivation = torch.full((8, 4), -100.0)
    h, _, _ = ordered_hidden(preactivation, torch.zeros(4), None, PhiloxGenerator(1),
                             z=torch.full((8,), 4))
    assert float(h.sum()) == 0.0


def test_a_zero_uniform_never_turns_on_a_unit_of_zero_probability(monkeypatch):
    # Key 0, block 14,883,995: its first float32 uniform is exactly 0 (found by a review).
    at_zero = PhiloxGenerator(0)
    at_zero.position = 14_883_995
    assert float(at_zero.uniform((1, 4))[0, 0]) == 0.0
    logits = torch.full((1, 4), -200.0)  # sigmoid underflows to exactly 0 in float32
    for mode in (["on", "off"] if compiled_available() else ["off"]):
        monkeypatch.setenv("IRBM_KERNELS", mode)
        stream = PhiloxGenerator(0)
        stream.position = 14_883_995
        sample = (bernoulli_from_logits(logits, stream) if mode == "on"
                  else irbm.models.bernoulli(torch.sigmoid(logits), stream))
        assert float(sample.sum()) == 0.0, mode
    if compiled_available():  # the annealed step draws its units the same way
        stream = PhiloxGenerator(0)
        stream.position = 14_883_995
        hidden, _ = kernels.annealed_bernoulli(logits, 0.5, 1.0, stream)
        assert float(hidden.sum()) == 0.0


@needs_kernels
@pytest.mark.parametrize("a", [-90.0, -200.0])
def test_a_zero_uniform_never_turns_on_an_ordered_unit_of_zero_probability(a):
    """The z step's sigmoid reuses the softplus's e^-|a|, which float32 clamps at e^-87: past
    it that must count as 0, as in the eager path (found by a review)."""
    stream = PhiloxGenerator(0)
    stream.position = 14_883_995  # its first float32 uniform is exactly 0
    assert float(copy_of(stream).uniform((1, 4))[0, 0]) == 0.0
    h, _, _ = ordered_hidden(torch.full((1, 4), a), torch.zeros(4), None, stream,
                             z=torch.full((1,), 4))
    assert float(h.sum()) == 0.0
    weighted, _, _, _ = kernels.ordered_statistics(torch.full((3, 4), a), torch.zeros(4), 0.5,
                                                   -torch.ones(3), PhiloxGenerator(1))
    assert float(weighted.abs().max()) == 0.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_uniforms_lie_below_one(dtype):
    draws = PhiloxGenerator(5).uniform((4000, 9), dtype)
    assert draws.dtype == dtype and float(draws.min()) >= 0.0 and float(draws.max()) < 1.0
    assert abs(float(draws.float().mean()) - 0.5) < 0.01


# ---------------------------------------------------------------------------- ordered kernel
# Tiny ordered layers whose z spreads over every category: pre-activations a_i and penalties.
ORDERED_CASES = {
    "K4": ([0.7, -0.4, 1.3, 0.2], [0.9, 0.5, 1.1, 0.8]),
    "K9": ([0.3, 1.1, -0.6, 0.9, 0.0, 1.7, -1.2, 0.4, 0.8],
           [0.8, 0.9, 0.3, 1.0, 0.6, 1.4, 0.2, 0.9, 0.95]),
}


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log_tail", [None, -0.7, 0.9])
@pytest.mark.parametrize("case", ORDERED_CASES)
def test_ordered_z_and_h_follow_the_exact_distribution(case, log_tail, dtype):
    a, penalties = (torch.tensor(x, dtype=torch.float64) for x in ORDERED_CASES[case])
    n_rows, n_units = 4000, len(a)
    preactivation = a.to(dtype).repeat(n_rows, 1)
    generator = PhiloxGenerator(77)
    h, z, log_sum = ordered_hidden(preactivation, penalties.to(dtype), log_tail, generator)
    n_categories = n_units + (log_tail is not None)
    assert h.dtype == dtype and h.shape == (n_rows, n_units)
    assert z.dtype == torch.int64 and z.shape == (n_rows,)
    assert generator.get_state()[2] == n_rows * (1 + blocks_per_row(n_units))
    assert int(z.min()) >= 1 and int(z.max()) <= n_categories
    # z ~ softmax of the cumulative columns.
    columns = exact_columns(a.to(dtype), penalties.to(dtype), log_tail)
    probabilities = torch.softmax(columns, 0)
    counts = torch.bincount(z - 1, minlength=n_categories)
    assert chi_square_p(counts, probabilities) > 1e-5, (counts, probabilities * n_rows)
    # h_i (0-based) ~ Bernoulli(sigmoid(a_i)) where i < z, exactly 0 beyond.
    selected = torch.arange(n_units) < z.unsqueeze(1)
    assert bool((h[~selected] == 0).all())
    assert bool(((h == 0) | (h == 1)).all())
    ones, trials = (h * selected).double().sum(0), selected.double().sum(0)
    zs = binomial_z(ones, trials, torch.sigmoid(a.to(dtype).double()))
    assert float(zs[trials > 30].abs().max()) < 4.5, zs
    # log sum_z w_z.
    assert log_sum.shape == (n_rows,)
    torch.testing.assert_close(log_sum.double(), torch.logsumexp(columns, 0).expand(n_rows),
                               rtol=1e-10 if dtype == torch.float64 else 1e-5, atol=0)


@needs_kernels
@pytest.mark.parametrize("log_tail", [None, 0.4])
def test_ordered_draws_invert_the_cdf_of_the_streams_uniforms(log_tail):
    """float64, draw for draw: the (N, 1) draw u picks the first z whose CDF reaches (1 - u)
    of the total, then the (N, K) draw gives h_i = [i < z] [u_i < sigmoid(a_i)]."""
    generator = torch.Generator().manual_seed(8)
    n_rows, n_units = 500, 11
    preactivation = 1.5 * torch.randn(n_rows, n_units, generator=generator, dtype=torch.float64)
    penalties = torch.rand(n_units, generator=generator, dtype=torch.float64) + 0.5
    stream = generator_at(HIGH_KEY, 3)
    reference = copy_of(stream)
    h, z, _ = ordered_hidden(preactivation, penalties, log_tail, stream)
    z_uniform = reference.uniform((n_rows, 1), torch.float64)
    h_uniform = reference.uniform((n_rows, n_units), torch.float64)
    assert torch.equal(stream.get_state(), reference.get_state())
    columns = exact_columns(preactivation, penalties, log_tail)
    cdf = torch.cumsum(torch.exp(columns - columns.amax(1, keepdim=True)), 1)
    expected_z = torch.searchsorted(cdf, (1 - z_uniform) * cdf[:, -1:]).squeeze(1) + 1
    assert torch.equal(z, expected_z)
    selected = torch.arange(n_units) < z.unsqueeze(1)
    expected_h = ((h_uniform < torch.sigmoid(preactivation)) & selected).double()
    assert torch.equal(h, expected_h)


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log_tail", [None, -1.3, 2.5])
@pytest.mark.parametrize("n_units", [1, 3, 8, 13, 37])
def test_ordered_log_sum_is_the_exact_logsumexp(n_units, log_tail, dtype):
    generator = torch.Generator().manual_seed(n_units)
    preactivation = 3.0 * torch.randn(64, n_units, generator=generator, dtype=torch.float64)
    preactivation[0, 0] = 35.0  # softplus beyond torch's linear cut-off at 20
    preactivation[1, -1] = -35.0
    penalties = 2.0 * torch.rand(n_units, generator=generator, dtype=torch.float64)
    preactivation, penalties = preactivation.to(dtype), penalties.to(dtype)
    _, _, log_sum = ordered_hidden(preactivation, penalties, log_tail, PhiloxGenerator(5))
    exact = torch.logsumexp(exact_columns(preactivation, penalties, log_tail), 1)
    assert log_sum.shape == (64,) and log_sum.dtype in (dtype, torch.float64)
    if dtype == torch.float64:
        torch.testing.assert_close(log_sum.double(), exact, rtol=1e-10, atol=1e-10)
    else:
        torch.testing.assert_close(log_sum.double(), exact, rtol=1e-5, atol=1e-6)


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log_tail", [None, 0.9])
def test_ordered_hidden_with_a_given_z(dtype, log_tail):
    generator = torch.Generator().manual_seed(4)
    n_rows, n_units = 300, 6
    preactivation = torch.randn(n_rows, n_units, generator=generator, dtype=torch.float64)
    penalties = torch.rand(n_units, generator=generator, dtype=torch.float64)
    n_categories = n_units + (log_tail is not None)
    given = torch.randint(1, n_categories + 1, (n_rows,), generator=generator)
    preactivation, penalties = preactivation.to(dtype), penalties.to(dtype)
    stream = generator_at(HIGH_KEY, 40)
    reference = copy_of(stream)
    h, z, log_sum = ordered_hidden(preactivation, penalties, log_tail, stream, z=given.clone())
    # No draw for z: only the (N, K) draw for h.
    assert stream.get_state()[2] == 40 + n_rows * blocks_per_row(n_units)
    assert torch.equal(z, given)
    selected = torch.arange(n_units) < given.unsqueeze(1)
    assert bool((h[~selected] == 0).all())
    expected = ((reference.uniform((n_rows, n_units), dtype) <
                 torch.sigmoid(preactivation.double()).to(dtype)) & selected).to(dtype)
    mismatches = int((h != expected).sum())
    assert mismatches == 0 if dtype == torch.float64 else mismatches <= 1e-4 * h.numel()
    exact = torch.logsumexp(exact_columns(preactivation, penalties, log_tail), 1)
    tolerance = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(log_sum.double(), exact, rtol=tolerance, atol=tolerance)


# ---------------------------------------------------------------------------- whole models
def random_model(family, dtype, n_visible=13, n_hidden=9, seed=0):
    """A model with random parameters large enough for every z and unit to matter."""
    extra = {"beta": 1.3} if family != "rbm" else {}
    model = irbm.build_model({"family": family, "n_visible": n_visible, "n_hidden": n_hidden,
                              **extra}, dtype=dtype)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.W.copy_(0.8 * torch.randn(model.W.shape, generator=generator, dtype=torch.float64))
        model.b.copy_(torch.randn(model.b.shape, generator=generator, dtype=torch.float64) + 0.3)
        model.c.copy_(torch.randn(model.c.shape, generator=generator, dtype=torch.float64))
    return model


def random_visible(n_rows, n_visible, dtype, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(n_rows, n_visible, generator=generator) < 0.5).to(dtype)


@pytest.fixture
def kernel_calls(monkeypatch):
    """Names of the kernels the families call (they reach them as ``kernels.<name>``)."""
    calls = []

    def spy(name, original):
        def called(*args, **kwargs):
            calls.append(name)
            return original(*args, **kwargs)
        return called

    for name in ("bernoulli_from_logits", "ordered_hidden", "ordered_statistics",
                 "annealed_bernoulli"):
        monkeypatch.setattr(kernels, name, spy(name, getattr(kernels, name)))
    return calls


def _gibbs_chain(model, v, generator, n_steps):
    states = []
    for _ in range(n_steps):
        v, state = model.gibbs_step(v, generator)
        states.append((v, state.h, state.z))
    return states


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_and_eager_gibbs_steps_agree(family, dtype, monkeypatch, kernel_calls):
    model = random_model(family, dtype)
    v = random_visible(300, model.n_visible, dtype)
    n_steps = 3 if dtype == torch.float64 else 1
    fused_generator = generator_at(HIGH_KEY, 7)
    assert usable(fused_generator, v)
    fused = _gibbs_chain(model, v, fused_generator, n_steps)
    expected_calls = (["ordered_hidden"] if model.has_z else ["bernoulli_from_logits"]) + \
        ["bernoulli_from_logits"]
    assert kernel_calls == expected_calls * n_steps
    monkeypatch.setenv("IRBM_KERNELS", "off")
    assert not compiled_available()
    eager_generator = generator_at(HIGH_KEY, 7)
    eager = _gibbs_chain(model, v, eager_generator, n_steps)
    assert kernel_calls == expected_calls * n_steps  # the eager path called no kernel
    assert torch.equal(fused_generator.get_state(), eager_generator.get_state())
    for (v_fused, h_fused, z_fused), (v_eager, h_eager, z_eager) in zip(fused, eager):
        assert v_fused.dtype == v_eager.dtype == dtype and h_fused.dtype == h_eager.dtype
        if dtype == torch.float64:
            assert torch.equal(v_fused, v_eager) and torch.equal(h_fused, h_eager)
            assert (z_fused is None and z_eager is None) or torch.equal(z_fused, z_eager)
        else:  # ties of a probability and its uniform within float32 rounding
            assert int((v_fused != v_eager).sum()) <= 1e-3 * v_fused.numel()
            assert int((h_fused != h_eager).sum()) <= 1e-3 * h_fused.numel()
            if z_fused is not None:
                assert int((z_fused != z_eager).sum()) <= 1e-2 * z_fused.numel()


@needs_kernels
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_and_eager_sample_hidden_and_visible_agree(family, monkeypatch):
    dtype = torch.float64
    model = random_model(family, dtype, seed=3)
    v = random_visible(200, model.n_visible, dtype, seed=4)
    results = {}
    for mode in ("on", "off"):
        monkeypatch.setenv("IRBM_KERNELS", mode)
        generator = generator_at(HIGH_KEY, 100)
        state = model.sample_hidden(v, generator)
        visible = model.sample_visible(state, generator)
        given = model.sample_hidden(v, generator, z=state.z) if model.has_z else None
        results[mode] = (state.h, state.z, visible, given, generator.get_state())
    on, off = results["on"], results["off"]
    assert torch.equal(on[0], off[0]) and torch.equal(on[2], off[2])
    assert torch.equal(on[4], off[4])
    if model.has_z:
        assert torch.equal(on[1], off[1])
        assert torch.equal(on[3].h, off[3].h) and torch.equal(on[3].z, off[3].z)
        if family == "irbm":  # the tail category is drawn too
            assert int(on[1].max()) == model.n_hidden + 1


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", ["orbm", "irbm"])
def test_fused_and_eager_weighted_gradients_agree(family, dtype, monkeypatch, kernel_calls):
    """The fused z-aware statistics against the eager ones (themselves checked against brute
    force in test_models_gradients), with the same z drawn and the stream left alike."""
    model = random_model(family, dtype, n_visible=13, n_hidden=30, seed=8)
    v = random_visible(120, model.n_visible, dtype, seed=5)
    row_weights = torch.randn(120, generator=torch.Generator().manual_seed(2), dtype=dtype)
    results = {}
    for mode in ("on", "off"):
        monkeypatch.setenv("IRBM_KERNELS", mode)
        generator = generator_at(HIGH_KEY, 40)
        gradients, z = model.weighted_gradients(v, row_weights, generator)
        results[mode] = gradients, z, generator.get_state()
        assert kernel_calls == ["ordered_statistics"]  # once, by the fused pass only
    (fused, z_fused, end_fused), (eager, z_eager, end_eager) = results["on"], results["off"]
    tolerance = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else \
        {"rtol": 1e-4, "atol": 1e-5}
    for name in eager:
        torch.testing.assert_close(fused[name], eager[name], **tolerance)
    assert (fused.appended is None) == (eager.appended is None) == (family == "orbm")
    for name in eager.appended or {}:
        torch.testing.assert_close(fused.appended[name], eager.appended[name], **tolerance)
    assert torch.equal(end_fused, end_eager)
    assert int((z_fused != z_eager).sum()) <= (0 if dtype == torch.float64 else 2)


@needs_kernels
def test_the_fused_z_follows_the_models_conditional(kernel_calls):
    """An iRBM's z from the fused Gibbs step, against exp(model.log_p_z_given_v(v))."""
    model = random_model("irbm", torch.float64, n_visible=5, n_hidden=4, seed=6)
    with torch.no_grad():
        model.W.mul_(0.3)
    v = random_visible(1, model.n_visible, torch.float64, seed=2).repeat(4000, 1)
    state = model.sample_hidden(v, PhiloxGenerator(31))
    assert kernel_calls == ["ordered_hidden"]
    with torch.no_grad():
        probabilities = model.log_p_z_given_v(v[:1])[0].exp()
    counts = torch.bincount(state.z - 1, minlength=model.n_hidden + 1)
    assert chi_square_p(counts, probabilities) > 1e-5, (counts, probabilities * 4000)


# ---------------------------------------------------------------------------- threads
@pytest.fixture
def restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_kernels_do_not_depend_on_the_thread_count(dtype, restore_threads, monkeypatch):
    # Calls this small stay on one thread by default: lower the bar so two threads split rows.
    monkeypatch.setattr(kernels, "THREADED_MIN_ELEMENTS", 0)
    generator = torch.Generator().manual_seed(12)
    logits = (2.0 * torch.randn(203, 37, generator=generator, dtype=torch.float64)).to(dtype)
    penalties = torch.rand(37, generator=generator, dtype=torch.float64).to(dtype)
    model = random_model("irbm", dtype, seed=9)
    v = random_visible(203, model.n_visible, dtype, seed=10)
    from irbm.kernels import _compiled
    pairs = (_compiled.bernoulli_logits, _compiled.ordered_units, _compiled.annealed_units,
             _compiled.ordered_statistics, _compiled.released_units)
    tilts = [-kappa * (torch.arange(38, dtype=dtype) - 20).abs() for kappa in (0.5, 0.25)]
    for pair in pairs:
        monkeypatch.setattr(pair[1], "split_calls", 0)
    results = []
    # Three threads on two cores too: a middle block of rows, between two others.
    for threads in (1, 2, 3):
        torch.set_num_threads(threads)
        assert torch.get_num_threads() == threads
        stream = generator_at(HIGH_KEY, 1)
        outputs = [bernoulli_from_logits(logits, stream),
                   *ordered_hidden(logits, penalties, 0.5, stream),
                   *ordered_hidden(logits, penalties, None, stream,
                                   z=torch.arange(203) % 37 + 1),
                   *kernels.annealed_bernoulli(logits, 0.25, 0.5, stream),
                   *kernels.ordered_statistics(logits, penalties, 0.5,
                                               torch.linspace(-1, 1, 203, dtype=dtype), stream),
                   *kernels.released_hidden(logits, penalties, 0.5, *tilts, stream)]
        v_next, state = model.gibbs_step(v, stream)
        outputs += [v_next, state.h, state.z, stream.get_state()]
        results.append(outputs)
    for threaded in results[1:]:
        for one, two in zip(results[0], threaded):
            assert torch.equal(one, two)
    for pair in pairs:
        assert pair[1].split_calls, "the threaded kernels did not run"


def _threaded_draws(queue):
    """Put two-thread Bernoulli draws (a child process's) on ``queue``."""
    torch.set_num_threads(2)
    queue.put(bernoulli_from_logits(torch.zeros(64, 8), generator_at(HIGH_KEY, 1)).numpy())


@needs_kernels
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="no fork on this platform")
def test_a_forked_child_runs_the_threaded_kernels(restore_threads, monkeypatch):
    # The parent's kernel threads do not survive a fork (Dask and joblib workers fork): the
    # child must start its own rather than wait on the parent's forever.
    monkeypatch.setattr(kernels, "THREADED_MIN_ELEMENTS", 0)
    torch.set_num_threads(2)
    expected = bernoulli_from_logits(torch.zeros(64, 8), generator_at(HIGH_KEY, 1))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_threaded_draws, args=(queue,))
    child.start()
    try:
        drawn = queue.get(timeout=60)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert np.array_equal(drawn, expected.numpy())


# ---------------------------------------------------------------------------- training
TRAINING = dict(cd_k=2, batch_size=16, lr=0.1, l1=0.2, seed=3, progress=False)


def small_irbm():
    return irbm.InfiniteRBM(10, dtype=torch.float64)


def _updates(trainer, batches):
    sizes = []
    for batch in batches:
        trainer.update(batch)
        sizes.append(trainer.model.n_hidden)
    return sizes


def _assert_same_training_state(one, two):
    assert one.model.n_hidden == two.model.n_hidden
    for name in ("W", "b", "c"):
        assert torch.equal(getattr(one.model, name), getattr(two.model, name)), name
    assert torch.equal(one.chains, two.chains)
    gibbs_one, gibbs_two = one.gibbs_generator.get_state(), two.gibbs_generator.get_state()
    assert torch.equal(gibbs_one, gibbs_two)


def test_the_default_random_stream_is_philox_and_others_are_refused():
    assert isinstance(Trainer(small_irbm(), progress=False).gibbs_generator, PhiloxGenerator)
    assert Trainer(small_irbm(), progress=False).config.random_stream == "philox"
    torch_stream = Trainer(small_irbm(), random_stream="torch", progress=False)
    assert isinstance(torch_stream.gibbs_generator, torch.Generator)
    with pytest.raises(ValueError, match="random_stream"):
        Trainer(small_irbm(), random_stream="numpy", progress=False)


def test_a_run_records_the_random_stream_it_resolved_and_resumes_without_naming_it(tmp_path):
    """config.json names the generator (not None for "the device's default"); a resume that
    leaves the stream unset goes on with it, one that names another is a change."""
    from dataclasses import replace

    from irbm.settings import Settings
    from irbm.workflows import settings_for, train_run
    path = tmp_path / "rows.npy"
    np.save(path, np.random.default_rng(0).random((60, 6)) < 0.5)
    settings = Settings(family="irbm", dataset=str(path), epochs=1, cd_k=1, batch_size=16)
    assert settings.random_stream is None
    train_run(settings, tmp_path / "run", epoch_lines=False)

    def recorded():
        return json.loads((tmp_path / "run" / "config.json").read_text())["settings"]
    assert recorded()["random_stream"] == "philox"
    assert settings_for(tmp_path / "run", {}).random_stream == "philox"
    resumed = train_run(replace(settings, epochs=2), tmp_path / "run", epoch_lines=False)
    assert resumed.config.random_stream == "philox" and resumed.epoch == 2
    with pytest.raises(ValueError, match="random_stream: philox -> torch"):
        train_run(replace(settings, epochs=3, random_stream="torch"), tmp_path / "run",
                  epoch_lines=False)
    assert recorded()["random_stream"] == "philox"


@needs_kernels
def test_philox_training_resumes_bit_identically_and_ignores_the_thread_count(
        tmp_path, restore_threads, kernel_calls):
    batches = prototype_batches(10)
    straight = Trainer(small_irbm(), random_stream="philox", **TRAINING)
    sizes = _updates(straight, batches)
    assert "ordered_hidden" in kernel_calls and "bernoulli_from_logits" in kernel_calls
    # The run both grows and (with l1) shrinks.
    assert max(sizes) > 1
    assert any(later < earlier for earlier, later in zip(sizes, sizes[1:])), sizes

    first = Trainer(small_irbm(), random_stream="philox", **TRAINING)
    _updates(first, batches[:4])
    path = tmp_path / "state.safetensors"
    first.save_checkpoint(path)
    resumed = Trainer.from_checkpoint(path, progress=False)
    assert resumed.config.random_stream == "philox"
    assert isinstance(resumed.gibbs_generator, PhiloxGenerator)
    assert torch.equal(resumed.gibbs_generator.get_state(), first.gibbs_generator.get_state())
    assert _updates(resumed, batches[4:]) == sizes[4:]
    _assert_same_training_state(resumed, straight)

    torch.set_num_threads(2)
    two_threads = Trainer(small_irbm(), random_stream="philox", **TRAINING)
    assert _updates(two_threads, batches) == sizes
    _assert_same_training_state(two_threads, straight)


def test_a_checkpoint_without_a_recorded_random_stream_resumes_with_a_torch_generator(
        tmp_path):
    batches = prototype_batches(10)
    straight = Trainer(small_irbm(), random_stream="torch", **TRAINING)
    _updates(straight, batches)
    first = Trainer(small_irbm(), random_stream="torch", **TRAINING)
    _updates(first, batches[:5])
    path = tmp_path / "old.safetensors"
    first.save_checkpoint(path)
    tensors, metadata = ckpt.read_checkpoint(path)
    del metadata["training"]["random_stream"]
    ckpt.write_checkpoint(path, tensors, metadata)
    resumed = Trainer.from_checkpoint(path, progress=False)
    assert resumed.config.random_stream == "torch"
    assert isinstance(resumed.gibbs_generator, torch.Generator)
    _updates(resumed, batches[5:])
    assert resumed.model.n_hidden == straight.model.n_hidden
    for name in ("W", "b", "c"):
        assert torch.equal(getattr(resumed.model, name), getattr(straight.model, name)), name
    assert torch.equal(resumed.gibbs_generator.get_state(), straight.gibbs_generator.get_state())


# ---------------------------------------------------------------------------- ADAGRAD
def _adagrad_steps(model, optimizer, n_steps, seed=3):
    """``n_steps`` optimizer steps on gradients with exact zeros (as a unit z never reached
    gets), from ``model``'s state; returns the parameters and accumulators after each."""
    generator = torch.Generator().manual_seed(seed)
    history = []
    for _ in range(n_steps):
        gradients = {name: 0.01 * torch.randn(p.shape, generator=generator, dtype=p.dtype)
                     * (torch.rand(p.shape, generator=generator) < 0.7)
                     for name, p in model.named_parameters()}
        optimizer.step(model, gradients)
        history.append({**{name: p.detach().clone() for name, p in model.named_parameters()},
                        **{f"G {name}": g.clone() for name, g in optimizer.accumulators.items()}})
    return history


def _reference_adagrad(parameter, gradient, accumulator, *, lr, l1, epsilon, inside):
    """Optimizer's eager ADAGRAD step with a correctly rounded square root (numpy's; torch's
    vectorized one is within 0.5001 ulp): the operations in the same order, in place."""
    accumulator.addcmul_(gradient, gradient)
    total = accumulator + epsilon if inside else accumulator
    denominator = torch.from_numpy(np.sqrt(total.numpy()))
    if not inside:
        denominator = denominator.add(epsilon)
    parameter.addcdiv_(gradient, denominator, value=-lr)
    if l1:
        rate = denominator.masked_fill(accumulator == 0, 1.0).reciprocal().mul(lr * l1)
        parameter.sub_(torch.maximum(torch.minimum(parameter, rate), rate.neg()))


@needs_kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("placement", ["outside", "inside"])
@pytest.mark.parametrize("l1", [0.0, 0.01])
def test_the_fused_adagrad_step_is_the_eager_one_bit_for_bit(dtype, placement, l1):
    """`kernels.adagrad_step` against the eager step's operations with a correctly rounded
    square root, over steps with zero gradients (elements whose accumulator stays 0): equal
    bit for bit, exact zeros included."""
    generator = torch.Generator().manual_seed(4)
    shape = (37, 29)
    parameter = 0.05 * torch.randn(shape, generator=generator, dtype=dtype)
    accumulator = torch.zeros(shape, dtype=dtype)
    reference, reference_accumulator = parameter.clone(), accumulator.clone()
    for _ in range(5):
        gradient = 0.01 * torch.randn(shape, generator=generator, dtype=dtype) \
            * (torch.rand(shape, generator=generator) < 0.7)
        kernels.adagrad_step(parameter, gradient, accumulator, lr=0.05, l1=l1, epsilon=1e-6,
                             inside=placement == "inside")
        _reference_adagrad(reference, gradient, reference_accumulator, lr=0.05, l1=l1,
                           epsilon=1e-6, inside=placement == "inside")
        assert torch.equal(accumulator, reference_accumulator)
        assert torch.equal(parameter, reference)
    assert bool((parameter == 0).any()) == bool(l1)  # L1 gives exact zeros
    assert bool((accumulator == 0).any())  # some elements never had a gradient


@needs_kernels
@pytest.mark.parametrize("regularization", ["proximal", "weights", "authors"])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_optimizer_fuses_every_convention_within_rounding_of_its_eager_step(
        regularization, family, monkeypatch):
    """Optimizer.step with the kernel against IRBM_KERNELS=off, from the same state, for each
    regularization convention (L1 and L2 on): within 2 ulp (torch's square root), the kernel
    called for every parameter, the soft-threshold's zeros where the eager step has them but
    within rounding of the threshold."""
    from irbm.optim import Optimizer
    calls = []
    fused_step = kernels.adagrad_step
    monkeypatch.setattr(kernels, "adagrad_step",
                        lambda *args, **kwargs: calls.append(1) or fused_step(*args, **kwargs))
    start = random_model(family, torch.float32, n_hidden=40)
    after = {}
    for mode in ("on", "off"):
        monkeypatch.setenv("IRBM_KERNELS", mode)
        model = random_model(family, torch.float32, n_hidden=40)
        model.load_state_dict(start.state_dict())
        optimizer = Optimizer("adagrad", lr=0.05, l1=0.01, l2=0.01,
                              regularization=regularization)
        after[mode] = _adagrad_steps(model, optimizer, 3)[-1]
    eps = torch.finfo(torch.float32).eps
    for name, eager in after["off"].items():
        fused = after["on"][name]
        torch.testing.assert_close(fused, eager, rtol=8 * eps, atol=8 * eps, msg=name)
        flipped = (fused == 0) != (eager == 0)
        assert (eager[flipped].abs() <= 8 * eps).all() and (fused[flipped].abs() <= 8 * eps).all()
    assert len(calls) == 3 * 3  # three steps of W, b and c


@needs_kernels
def test_the_fused_adagrad_step_does_not_depend_on_the_thread_count(monkeypatch):
    from irbm.kernels import _compiled
    from irbm.optim import Optimizer
    monkeypatch.setattr(_compiled.adagrad[1], "split_calls", 0)
    start = random_model("orbm", torch.float32, n_visible=784, n_hidden=400)  # threaded
    finals = []
    for n_threads in (1, 2):
        previous = torch.get_num_threads()
        torch.set_num_threads(n_threads)
        try:
            model = random_model("orbm", torch.float32, n_visible=784, n_hidden=400)
            model.load_state_dict(start.state_dict())
            finals.append(_adagrad_steps(model, Optimizer("adagrad", lr=0.05, l1=0.01), 3)[-1])
        finally:
            torch.set_num_threads(previous)
    assert model.W.numel() >= kernels.THREADED_MIN_ELEMENTS
    assert _compiled.adagrad[1].split_calls, "the threaded step did not run"
    for name, tensor in finals[0].items():
        assert torch.equal(tensor, finals[1][name]), name


# ---------------------------------------------------------------------------- warming up
@needs_kernels
def test_warm_up_compiles_its_share_of_the_kernels_and_then_the_rest():
    """In a fresh interpreter, `warm_up(1, 2)` gives the serial kernels of its groups their
    float32 and float64 compilations (from numba's cache once the suite's workers have written
    it) and leaves the other group's uncompiled; `warm_up(0, 2)` then compiles those."""
    import json
    import subprocess
    import sys
    code = ("import json; from irbm import kernels; from irbm.kernels import _compiled\n"
            "def counts(): return {name: len(getattr(_compiled, name)[0].signatures) for name "
            "in ('bernoulli_logits', 'annealed_units', 'ordered_units', 'released_units', "
            "'ordered_statistics', 'adagrad')}\n"
            "kernels.warm_up(1, 2); first = counts(); kernels.warm_up(0, 2)\n"
            "print(json.dumps([first, counts()]))")
    first, both = json.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                            capture_output=True, text=True).stdout)
    ordered = {"ordered_units", "released_units"}
    assert first == {name: 0 if name in ordered else 2 for name in first}
    assert both == dict.fromkeys(first, 2)
    with pytest.raises(ValueError, match="share must lie in 0..shares - 1"):
        kernels.warm_up(2, 2)


@needs_kernels
def test_the_float32_exp_is_within_its_stated_error_and_saturates_at_both_ends():
    """`_exp32` (the kernels' vectorized exp) against float64 exp on every 64th float32 in
    [-87, 88.37] (2^k is built by hand there, where a slip shows as a factor of 2), and its
    clamps beyond: e^-87 below, inf above."""
    import numba

    from irbm.kernels._compiled import _exp32

    @numba.njit
    def exp32_of(x, out):
        for i in range(x.shape[0]):
            out[i] = _exp32(x[i])

    positive = np.arange(0, np.float32(88.37).view(np.int32), 64, dtype=np.int32)
    x = np.concatenate([positive.view(np.float32), -positive.view(np.float32)])
    x = x[x >= -87.0]
    out = np.empty_like(x)
    exp32_of(x, out)
    relative = np.abs(out.astype(np.float64) / np.exp(x.astype(np.float64)) - 1.0)
    assert relative.max() < 3e-7
    ends = np.array([-200.0, -87.5, 88.5, np.inf], np.float32)
    saturated = np.empty_like(ends)
    exp32_of(ends, saturated)
    assert saturated[0] == saturated[1] == pytest.approx(np.exp(-87.0), rel=3e-7)
    assert np.isinf(saturated[2:]).all()
