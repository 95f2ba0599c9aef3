"""Tests of irbm.plotting: every figure writes a PNG that opens and is not blank, images are
oriented as stored, the computations behind the figures are right, and saving is atomic."""

import os

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.image import imread

import irbm
from irbm import build_model, plotting, runs
from irbm.plotting import tile_images, top_inputs_by_z_interval
from irbm.plotting.ordered import equal_width_z_intervals, quantile_z_intervals
from irbm.sampling import sample

# An upright 8x8 image: the top two rows white, the rest black.
UPRIGHT = np.zeros((8, 8))
UPRIGHT[:2] = 1.0


def read_gray(path):
    """The PNG at ``path`` as gray levels in [0, 1], shape (height, width)."""
    pixels = imread(path)
    return pixels[..., :3].mean(-1)


def assert_non_trivial(path):
    gray = read_gray(path)
    assert gray.shape[0] > 50 and gray.shape[1] > 50
    assert gray.std() > 0.05, f"{path} looks blank"


def random_model(family, n_visible=16, n_hidden=6, seed=0, **options):
    model = build_model({"family": family, "n_visible": n_visible, "n_hidden": n_hidden,
                         **options}, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(2 * torch.randn(parameter.shape, generator=generator,
                                            dtype=torch.float64))
    return model


def binary_data(n_rows, n_visible=16, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(n_rows, n_visible, generator=generator) < 0.5).double()


# ------------------------------------------------------------------ tiling and orientation
def test_tile_images_layout_and_column_major_order():
    flat_column_major = UPRIGHT.ravel(order="F")
    assert np.array_equal(tile_images(flat_column_major, (8, 8), order="F"), UPRIGHT)
    # Reading column-major data as row-major transposes a square image.
    assert np.array_equal(tile_images(flat_column_major, (8, 8), order="C"), UPRIGHT.T)

    images = np.arange(5)[:, None] * np.ones((5, 6))  # five 2x3 images, image k filled with k
    mosaic = tile_images(images, (2, 3), n_columns=2, empty=np.inf)
    assert mosaic.shape == (3 * 3 - 1, 2 * 4 - 1)
    for k in range(5):
        row, column = divmod(k, 2)
        assert np.all(mosaic[3 * row:3 * row + 2, 4 * column:4 * column + 3] == k)
    assert np.isnan(mosaic[2, 0]) and np.isnan(mosaic[0, 3])  # borders
    assert np.all(np.isinf(mosaic[6:, 4:]))  # the unused sixth cell


def test_vectors_that_are_not_pictures_tile_into_a_heat_map_of_rows():
    """Data of shape (1, D) (no image shape): strips one pixel high side by side were
    unreadable; the rows stand one above the other instead, whatever n_columns asks."""
    vectors = np.random.default_rng(0).random((7, 30))
    for n_columns in (None, 12):
        mosaic = tile_images(vectors, (1, 30), n_columns=n_columns)
        assert np.array_equal(mosaic, vectors)


def test_image_grid_png_orientation(tmp_path):
    flat_column_major = UPRIGHT.ravel(order="F")
    plotting.image_grid(flat_column_major, (8, 8), tmp_path / "f.png", order="F")
    upright = read_gray(tmp_path / "f.png")
    height = upright.shape[0]
    assert upright[: height // 5].mean() > 0.9 and upright[height // 2:].mean() < 0.15

    plotting.image_grid(flat_column_major, (8, 8), tmp_path / "c.png", order="C")
    transposed = read_gray(tmp_path / "c.png")
    width = transposed.shape[1]
    assert transposed[:, : width // 5].mean() > 0.8 and transposed[:, width // 2:].mean() < 0.15


def test_image_grid_returns_figure_and_writes_png(tmp_path):
    images = binary_data(13, 64)
    figure = plotting.image_grid(images, (8, 8), tmp_path / "grid.png", n_columns=5, title="t")
    assert isinstance(figure, Figure)
    assert_non_trivial(tmp_path / "grid.png")
    assert isinstance(plotting.image_grid(images, (8, 8)), Figure)  # no path: nothing written
    assert sorted(os.listdir(tmp_path)) == ["grid.png"]


@pytest.mark.parametrize("arguments, message", [
    ({"image_shape": (3, 5)}, "does not match vectors of length 16"),
    ({"image_shape": 16}, "image_shape must be"),
    ({"order": "K"}, "order must be 'C'"),
    ({"n_columns": 0}, "n_columns must be >= 1"),
])
def test_image_grid_rejects_bad_arguments(arguments, message):
    call = {"image_shape": (4, 4), **arguments}
    with pytest.raises(ValueError, match=message):
        plotting.image_grid(binary_data(3), call.pop("image_shape"), **call)


# ------------------------------------------------------------------ atomic saving
def test_save_is_atomic_and_respects_umask(tmp_path, monkeypatch):
    path = tmp_path / "grid.png"
    path.write_bytes(b"old figure")

    def broken_savefig(self, stream, **options):
        stream.write(b"half a png")
        raise RuntimeError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(RuntimeError, match="disk full"):
        plotting.image_grid(binary_data(4), (4, 4), path)
    assert path.read_bytes() == b"old figure"
    assert sorted(os.listdir(tmp_path)) == ["grid.png"]  # no temporary file left

    monkeypatch.undo()
    plotting.image_grid(binary_data(4), (4, 4), path)
    assert_non_trivial(path)
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_missing_directory_raises_and_writes_nothing(tmp_path):
    with pytest.raises(OSError):
        plotting.image_grid(binary_data(4), (4, 4), tmp_path / "absent" / "grid.png")
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ filters and samples
def test_plot_filters(tmp_path):
    model = random_model("irbm", n_visible=64, n_hidden=5)
    model.grow(2)  # two untrained all-zero units must not break the per-filter scaling
    figure = plotting.plot_filters(model, (8, 8), tmp_path / "filters.png")
    assert_non_trivial(tmp_path / "filters.png")
    assert figure._suptitle.get_text() == "First 7 filters"
    plotting.plot_filters(model.filters()[:3].numpy(), (8, 8), tmp_path / "array.png",
                          order="F")
    assert_non_trivial(tmp_path / "array.png")
    with pytest.raises(ValueError, match="n_filters"):
        plotting.plot_filters(model, (8, 8), n_filters=0)


def test_plot_samples_panels_and_chain_evolution(tmp_path):
    model = random_model("orbm", n_visible=64)
    result = sample(model, 9, 6, every=2, z_max_init=True, generator=0)
    figure = plotting.plot_samples({"Test set": binary_data(9, 64), "oRBM": result}, (8, 8),
                                   tmp_path / "samples.png", title="Samples")
    assert [axes.get_title() for axes in figure.axes] == ["Test set", "oRBM"]
    assert_non_trivial(tmp_path / "samples.png")
    plotting.plot_samples(result.samples, (8, 8), tmp_path / "one.png")
    assert_non_trivial(tmp_path / "one.png")

    figure = plotting.plot_chain_evolution(result.snapshots, result.snapshot_steps, (8, 8),
                                           tmp_path / "chains.png")
    labels = [label.get_text() for label in figure.axes[0].get_xticklabels()]
    assert labels == ["0", "2", "4", "6"]
    assert_non_trivial(tmp_path / "chains.png")
    with pytest.raises(ValueError, match="steps has 2 entries for 4 snapshots"):
        plotting.plot_chain_evolution(result.snapshots, [0, 1], (8, 8))


# ------------------------------------------------------------------ P(z | v)
@pytest.mark.parametrize("family", ["orbm", "irbm"])
def test_plot_p_z_given_v(tmp_path, family):
    model = random_model(family)
    figure = plotting.plot_p_z_given_v(model, binary_data(4), (4, 4), tmp_path / "pz.png")
    assert_non_trivial(tmp_path / "pz.png")
    assert len(figure.axes) == 8  # an image and a curve per example
    legend = figure.axes[1].get_legend()
    texts = [text.get_text() for axes in figure.axes for text in axes.texts]
    if model.has_tail:
        assert any(text.get_text().startswith("z > l") for text in legend.get_texts())
        assert len(texts) == 4 and all(text.startswith("P(z > l | v) = ") for text in texts)
    else:
        assert legend is None and texts == []


def test_plot_p_z_given_v_dominant_tail_is_marked_off_scale(tmp_path):
    # With beta = 1.01 and small weights, almost all the mass is in the tail z > l.
    model = build_model({"family": "irbm", "n_visible": 16, "n_hidden": 4}, dtype=torch.float64)
    figure = plotting.plot_p_z_given_v(model, binary_data(2), (4, 4), tmp_path / "pz.png")
    labels = [text.get_text() for text in figure.axes[1].get_legend().get_texts()]
    assert "z > l (tail), off scale" in labels
    assert_non_trivial(tmp_path / "pz.png")


def test_p_z_figures_reject_rbm():
    model = random_model("rbm")
    with pytest.raises(ValueError, match="orbm or irbm"):
        plotting.plot_p_z_given_v(model, binary_data(2), (4, 4))
    with pytest.raises(ValueError, match="orbm or irbm"):
        plotting.plot_top_inputs_by_z_interval(model, binary_data(2), (4, 4))


# ------------------------------------------------------------------ top inputs by interval of z
@pytest.mark.parametrize("family", ["orbm", "irbm"])
def test_top_inputs_by_z_interval_are_the_maximizers(family):
    model = random_model(family, n_hidden=12)
    data = binary_data(300)
    indices, averages, intervals = top_inputs_by_z_interval(model, data, top=10, batch_size=64)
    # Default intervals tile 1..n_hidden without gaps.
    assert intervals[0][0] == 1 and intervals[-1][1] == 13
    assert all(b == a_next for (_, b), (a_next, _) in zip(intervals, intervals[1:]))
    probabilities = torch.exp(model.log_p_z_given_v(data)).detach().numpy()
    for column, (a, b) in enumerate(intervals):
        mass = probabilities[:, a - 1:b - 1].sum(1)
        best = np.sort(mass)[::-1][:10]
        assert np.allclose(mass[indices[:, column]], best)
        assert averages[column] == pytest.approx(best.mean())


def test_top_inputs_explicit_intervals_and_errors():
    model = random_model("orbm", n_hidden=6)
    data = binary_data(5)
    indices, averages, intervals = top_inputs_by_z_interval(model, data, [(1, 3), (3, 7)], top=10)
    assert indices.shape == (5, 2) and intervals == [(1, 3), (3, 7)]  # top clipped to 5 rows
    for bad in ([(0, 2)], [(3, 3)], [(2, 8)], []):
        with pytest.raises(ValueError, match="interval"):
            top_inputs_by_z_interval(model, data, bad)
    with pytest.raises(ValueError, match="top must be >= 1"):
        top_inputs_by_z_interval(model, data, top=0)


def test_plot_top_inputs_by_z_interval(tmp_path):
    model = random_model("irbm", n_hidden=12)
    # Equal-width intervals given explicitly (they were the default before the quantile ones).
    figure = plotting.plot_top_inputs_by_z_interval(model, binary_data(200), (4, 4),
                                                    tmp_path / "top.png", top=10,
                                                    intervals=equal_width_z_intervals(12))
    assert_non_trivial(tmp_path / "top.png")
    image_axes = figure.axes[0]
    labels = [label.get_text() for label in image_axes.get_xticklabels()]
    assert labels[0] == "[1, 2)" and labels[-1] == "[12, 13)" and len(labels) == 10
    assert len(image_axes.get_yticklabels()) == 10


def geometric_z_model(family, n_hidden=50):
    """Zero weights and biases with beta = 3: each unit costs 2 ln 2, so P(z | v) = 3/4 (1/4)^(z-1)
    for every v (up to the last units), all its mass at small z whatever the input."""
    model = build_model({"family": family, "n_visible": 16, "n_hidden": n_hidden, "beta": 3.0},
                        dtype=torch.float64)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    return model


@pytest.mark.parametrize("family", ["orbm", "irbm"])
def test_p_z_axis_stops_where_the_mass_is(family):
    model = geometric_z_model(family)
    figure = plotting.plot_p_z_given_v(model, binary_data(3), (4, 4))
    curve_axes = figure.axes[-1]
    # 0.999 of the mass lies at z <= 5; the axis ends a few units later, far from l = 50.
    assert 5 < curve_axes.get_xlim()[1] < 15
    assert "axis cut at z =" in curve_axes.get_xlabel()
    assert max(len(line.get_xdata()) for line in curve_axes.get_lines()) < 15
    if model.has_tail:  # the tail keeps its marker and its value
        assert all(text.get_text().startswith("P(z > l | v) = ")
                   for axes in figure.axes[1::2] for text in axes.texts)
        markers = [line for line in curve_axes.get_lines() if line.get_marker() in "D^"]
        position = markers[0].get_xdata()[0]
        assert position < curve_axes.get_xlim()[1]
        # Its tick says "> l", not a number that would pass it off as one value of z.
        ticks = dict(zip(curve_axes.get_xticks(), curve_axes.get_xticklabels()))
        assert ticks[position].get_text() == "> l"


def test_p_z_axis_is_not_cut_when_the_curves_fill_it():
    model = random_model("orbm", n_hidden=6)
    figure = plotting.plot_p_z_given_v(model, binary_data(4), (4, 4))
    assert figure.axes[-1].get_xlim()[1] >= 6
    assert "cut" not in figure.axes[-1].get_xlabel()


def test_default_z_intervals_hold_comparable_shares_of_the_mass():
    model = geometric_z_model("orbm")
    data = binary_data(100)
    _, _, intervals = top_inputs_by_z_interval(model, data)
    pooled = torch.exp(model.log_p_z_given_v(data)).sum(0).detach().numpy()
    shares = [pooled[a - 1:b - 1].sum() / pooled.sum() for a, b in intervals]
    # Equal-width intervals would give [1, 6) all the mass and the nine others ~1e-3 or less.
    assert min(shares) > 0.01
    assert intervals[0][0] == 1 and intervals[-1][1] == 51
    assert all(b == a_next for (_, b), (a_next, _) in zip(intervals, intervals[1:]))


def test_quantile_z_intervals():
    assert quantile_z_intervals(np.ones(20), 4) == [(1, 6), (6, 11), (11, 16), (16, 21)]
    # All the mass on z = 101..150: the empty ends join the first and last intervals.
    mass = np.r_[np.zeros(100), np.ones(50), np.zeros(100)]
    intervals = quantile_z_intervals(mass, 5)
    assert intervals == [(1, 111), (111, 121), (121, 131), (131, 141), (141, 251)]
    # A value worth more than a share gets its own interval; a sliver joins its neighbour.
    assert quantile_z_intervals([0.3, 0.001, 0.3, 0.1, 0.1, 0.2], 10) == [
        (1, 3), (3, 4), (4, 5), (5, 6), (6, 7)]
    for bad in ([], [0.0, 0.0], [1.0, -1.0]):
        with pytest.raises(ValueError, match="mass"):
            quantile_z_intervals(bad)


# ------------------------------------------------------------------ curves
def test_plot_size_history(tmp_path):
    epochs = np.arange(1, 31)
    plotting.plot_size_history(epochs, np.minimum(epochs * 4, 90), tmp_path / "size.png")
    assert_non_trivial(tmp_path / "size.png")
    with pytest.raises(ValueError, match="equal length"):
        plotting.plot_size_history(epochs, epochs[:-1])


def test_plot_ais_convergence_with_infinite_lower_bounds(tmp_path):
    n_chains = np.array([10, 100, 1000, 5000])
    log_z = np.array([40.0, 40.4, 40.3, 40.31])
    low = np.array([-np.inf, 39.5, -np.inf, 40.2])
    figure = plotting.plot_ais_convergence(n_chains, log_z, low, log_z + 0.3,
                                           tmp_path / "ais.png", exact=40.32)
    assert_non_trivial(tmp_path / "ais.png")
    axes = figure.axes[0]
    assert any("−∞ for 2 of 4" in text.get_text() for text in axes.texts)
    bottom, top = axes.get_ylim()
    assert np.isfinite(bottom) and bottom < 39.5 and top > 40.7
    assert axes.get_xscale() == "log"
    # Plain labels at 1, 2 and 5 per decade, none on the minor ticks (they overlapped).
    figure.canvas.draw()
    labels = [t.get_text() for t in axes.get_xticklabels() if t.get_text()]
    assert set(labels) >= {"10", "100", "1000", "5000"} and set(labels) <= {
        f"{m * 10**k:g}" for m in (1, 2, 5) for k in range(6)}, labels
    assert not any(t.get_text() for t in axes.xaxis.get_minorticklabels())


def test_plot_ais_convergence_finite_and_errors(tmp_path):
    figure = plotting.plot_ais_convergence([100, 200], [5.0, 5.1], [4.9, 5.05], [5.1, 5.15],
                                           tmp_path / "ais.png")
    assert len(figure.axes[0].texts) == 0
    assert_non_trivial(tmp_path / "ais.png")
    with pytest.raises(ValueError, match="equal length"):
        plotting.plot_ais_convergence([1, 2], [1.0], [0.0], [2.0])
    with pytest.raises(ValueError, match="no finite value"):
        plotting.plot_ais_convergence([1], [np.nan], [np.nan], [np.nan])


def test_plot_training_curves(tmp_path):
    history = [{"epoch": epoch, "train_free_energy": 50 - epoch, "n_hidden": 1 + epoch // 3,
                "reconstruction_error": 1 / epoch, "note": "text values are skipped",
                **({"valid_free_energy": 52 - epoch} if epoch % 5 == 0 else {})}
               for epoch in range(1, 21)]
    figure = plotting.plot_training_curves(history, tmp_path / "curves.png")
    assert_non_trivial(tmp_path / "curves.png")
    assert len(figure.axes) == 3  # free energies share a panel
    free_energy_lines = figure.axes[0].get_lines()
    assert [len(line.get_xdata()) for line in free_energy_lines] == [20, 4]
    for bad in ([], [{"epoch": 1}], ["not a dict"]):
        with pytest.raises(ValueError, match="history"):
            plotting.plot_training_curves(bad)



def test_training_curves_of_an_rbm_have_no_flat_n_hidden_panel():
    history = [{"epoch": epoch, "train_free_energy": 50 - epoch, "n_hidden": 100,
                "reconstruction_error": 1 / epoch} for epoch in range(1, 11)]
    figure = plotting.plot_training_curves(history)
    labels = [axes.get_ylabel() for axes in figure.axes]
    assert len(figure.axes) == 2 and "hidden units" not in labels
    assert "reconstruction error" in labels
    assert any("constant: hidden units = 100" in text for text in all_texts(figure))
    # The AIS callback's keys say what they are.
    history[4].update(valid_nll=30.0, log_z=12.0)
    history[9].update(valid_nll=29.0, log_z=12.5)
    labels = [axes.get_ylabel() for axes in plotting.plot_training_curves(history).axes]
    assert {"validation NLL (AIS)", "ln Z (AIS)"} <= set(labels), labels
    # Constant series are still drawn when nothing else varies.
    assert len(plotting.plot_training_curves([{"epoch": 1, "n_hidden": 5}]).axes) == 1


def overlaps(first, second) -> bool:
    return (first.x0 < second.x1 and second.x0 < first.x1
            and first.y0 < second.y1 and second.y0 < first.y1)


@pytest.mark.parametrize("log_z", [[40.0, 40.4, 40.3, 40.31], [40.31, 40.3, 40.4, 40.0]])
def test_ais_note_is_clear_of_the_legend_and_the_axes(log_z):
    n_chains = np.array([10, 100, 1000, 5000])
    log_z = np.array(log_z)
    low, high = np.array([-np.inf, 39.5, -np.inf, 40.0]), log_z + 0.3
    high[3] = np.inf
    figure = plotting.plot_ais_convergence(n_chains, log_z, low, high)
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    axes = figure.axes[0]
    notes = [text for text in axes.texts if "−∞" in text.get_text()]
    assert len(notes) == 1 and "+∞ for 1" in notes[0].get_text()
    note = notes[0].get_window_extent(renderer)
    assert not overlaps(note, axes.get_legend().get_window_extent(renderer))
    assert note.y1 <= axes.xaxis.label.get_window_extent(renderer).y0  # under the x label
    assert note.y0 >= 0 and note.x1 <= figure.bbox.x1  # and inside the picture


# ------------------------------------------------------------------ one colour convention
# A 4x4 binary image with both values; 1 must be white and 0 black in every image figure.
PATTERN = np.array([1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1], dtype=np.float64)


def image_rgb(axes):
    """RGB (H, W, 3) of the first image drawn in ``axes``, whatever way it was drawn."""
    image = axes.images[0]
    return image.to_rgba(image.get_array())[..., :3]


def first_cell(rgb, size=4):
    return rgb[:size, :size].reshape(-1, 3)


def all_texts(figure):
    """The figure's texts, each as one line (a narrow figure wraps its title and caption)."""
    return [" ".join(text.get_text().split()) for text in figure.texts] + [
        " ".join(text.get_text().split()) for axes in figure.axes for text in axes.texts]


def test_binary_images_share_one_colour_convention():
    model = random_model("irbm", n_hidden=6)
    data = torch.as_tensor(np.tile(PATTERN, (12, 1)))
    expected = np.where(PATTERN[:, None] == 1, 1.0, 0.0) * np.ones(3)  # white for 1, black 0
    figures = {
        "samples": plotting.plot_samples(PATTERN[None], (4, 4), one_means="background"),
        "panels": plotting.plot_samples({"a": PATTERN[None]}, (4, 4), one_means="background"),
        "chains": plotting.plot_chain_evolution(PATTERN[None, None], [0], (4, 4),
                                                one_means="background"),
        "p_z": plotting.plot_p_z_given_v(model, PATTERN[None], (4, 4), one_means="background"),
        "top": plotting.plot_top_inputs_by_z_interval(model, data, (4, 4), top=2,
                                                      one_means="background"),
    }
    axes_with_image = {name: next(axes for axes in figure.axes if axes.images)
                       for name, figure in figures.items()}
    for name, axes in axes_with_image.items():
        assert np.allclose(first_cell(image_rgb(axes)), expected), name
        # The caption says what white is, naming what 1 stands for in this data.
        assert "white = 1 (background), black = 0" in all_texts(figures[name]), name
    # Framed, so that white pixels at the edge do not merge into the white page.
    frame = axes_with_image["p_z"].spines["left"]
    assert frame.get_visible() and frame.get_edgecolor()[:3] != (1.0, 1.0, 1.0)


def test_image_grid_caption_only_with_title_or_meaning():
    assert all_texts(plotting.image_grid(PATTERN, (4, 4))) == []
    texts = all_texts(plotting.image_grid(PATTERN, (4, 4), title="Data"))
    assert "white = 1, black = 0" in texts  # neutral when the meaning of 1 is unknown


def test_filters_use_a_diverging_map_centred_at_zero():
    weights = np.zeros((1, 16))
    weights[0, 0], weights[0, 1] = 2.0, -2.0
    figure = plotting.plot_filters(weights, (4, 4))
    rgb = image_rgb(figure.axes[0])
    positive, negative, zero = rgb[0, 0], rgb[0, 1], rgb[0, 2]
    assert positive.argmax() == 0 and negative.argmax() == 2  # red and blue
    assert np.all(zero > 0.9)  # zero is white, not the mid-gray of a binary image
    assert any("red > 0 > blue" in text for text in all_texts(figure))


def test_samples_figure_shows_binary_states_not_last_step_probabilities():
    model = random_model("irbm", n_visible=16)
    result = sample(model, 9, 5, generator=0)
    assert not torch.all((result.probabilities == 0) | (result.probabilities == 1))
    shown = image_rgb(plotting.plot_samples(result, (4, 4)).axes[0])
    cells = first_cell(shown)
    assert np.all((cells == 0) | (cells == 1))  # only black and white
    assert np.allclose(cells[:, 0], result.samples[0].numpy())
    smooth = image_rgb(plotting.plot_samples(result, (4, 4), probabilities=True).axes[0])
    assert np.allclose(first_cell(smooth)[:, 0], result.probabilities[0].numpy(), atol=0.01)


# ------------------------------------------------------------------ all the figures of a run
class TinyDataset:
    """What `figures_for_run` reads from a dataset."""
    image_shape, pixel_order, n_visible, one_means = (4, 4), "C", 16, "background"

    def __init__(self):
        self.train = self.test = binary_data(40).numpy().astype(np.uint8)


@pytest.mark.parametrize("family", ["rbm", "irbm"])
def test_figures_for_run(tmp_path, monkeypatch, family):
    from irbm.plotting import run
    model = random_model(family).float()
    irbm.save(model, tmp_path / "model.safetensors", extra={"epoch": 2})
    # The model with z also grew during training (the size history says so).
    sizes = [(0, 4), (2, 6)] if model.has_z else [(0, 6), (2, 6)]
    history = [{"epoch": epoch, "n_hidden": 6, "train_free_energy": 10.0 - epoch}
                for epoch in (1, 2, 3)]
    runs.write_json(tmp_path / runs.HISTORY_FILE, {"history": history, "size_history": sizes})
    captions, options_of = [], {}
    for name in ("plot_samples", "plot_p_z_given_v", "plot_top_inputs_by_z_interval",
                 "plot_filters", "plot_training_curves", "plot_size_history"):
        original = getattr(run, name)

        def spy(*args, _original=original, _name=name, **options):
            if _name not in ("plot_filters", "plot_training_curves", "plot_size_history"):
                captions.append(options.get("one_means"))
            options_of[_name] = options
            return _original(*args, **options)
        monkeypatch.setattr(run, name, spy)

    written = plotting.figures_for_run(tmp_path, TinyDataset())
    expected = {"filters", "samples", "training_curves"}
    if model.has_z:
        expected |= {"p_z_given_v", "top_inputs_by_z", "hidden_size"}
    assert {path.stem for path in written} == expected
    for path in written:
        assert_non_trivial(path)
    assert captions and set(captions) == {"background"}  # taken from the dataset
    # Each figure of the model says which one (a best model sat beside curves run on past
    # it), and the curves mark its epoch (a walkthrough).
    for name in ("plot_samples", "plot_filters") + (("plot_p_z_given_v",) if model.has_z else ()):
        assert options_of[name]["title"].endswith("latest model, epoch 2)"), \
            options_of[name]["title"]
    assert "1000 Gibbs steps from noise" in options_of["plot_samples"]["title"]
    assert options_of["plot_training_curves"]["mark_epoch"] == 2
    if model.has_z:
        assert options_of["plot_size_history"]["mark_epoch"] == 2


def test_curves_mark_the_model_drawn_and_doubtful_validations():
    """A walkthrough read every validation point as one to trust, though each was logged
    unreliable, and curves that ran past the best model drawn beside them; the size figure
    counted epochs by 2.5."""
    from matplotlib.ticker import MaxNLocator
    history = [{"epoch": epoch, "valid_nll": 100.0 - epoch, "log_z": 50.0 + epoch,
                "log_z_reliable": epoch != 2, "train_free_energy": 10.0 - epoch}
               for epoch in (1, 2, 3, 4)]
    figure = plotting.plot_training_curves(history, mark_epoch=3)
    labels = [[line.get_label() for line in axes.get_lines()] for axes in figure.axes]
    doubted = [line for axes in figure.axes for line in axes.get_lines()
               if line.get_label().lstrip("_").startswith("unreliable")]
    assert len(doubted) == 2 and all(list(line.get_xdata()) == [2.0] for line in doubted)
    assert all("the model drawn (epoch 3)" in panel for panel in labels)
    # Two doubted series in one panel (the raw and the averaged model's NLL): one legend entry.
    both = plotting.plot_training_curves([{**row, "average_valid_nll": row["valid_nll"] + 1,
                                           "average_log_z_reliable": False} for row in history])
    (nll_panel,) = [axes for axes in both.axes
                    if "validation NLL (AIS)" in [line.get_label() for line in axes.get_lines()]]
    legend = [text.get_text() for text in nll_panel.get_legend().get_texts()]
    assert legend.count("unreliable AIS (few effective chains)") == 1, legend
    # At the last epoch nothing is marked: the curves end at the model drawn.
    last = plotting.plot_training_curves(history, mark_epoch=4)
    assert not any(line.get_label().startswith("the model drawn")
                   for axes in last.axes for line in axes.get_lines())
    sizes = plotting.plot_size_history(np.arange(0, 21), np.arange(0, 21) + 5, mark_epoch=10)
    axes = sizes.axes[0]
    assert isinstance(axes.xaxis.get_major_locator(), MaxNLocator)
    assert all(float(tick).is_integer() for tick in axes.get_xticks())
    assert "the model drawn (epoch 10)" in [line.get_label() for line in axes.get_lines()]
    ais = plotting.plot_ais_convergence([10, 100], [505.0, 511.0], [504.0, 510.0],
                                        [506.0, 512.0], floor=523.47)
    floor_lines = [line for line in ais.axes[0].get_lines()
                   if line.get_label().startswith("certain floor of ln Z = 523.47")]
    assert floor_lines and ais.axes[0].get_ylim()[1] > 523.47  # in view, above the estimates


def test_standard_errors_in_a_history_are_not_drawn_as_curves():
    """--eval-every records valid_nll_stderr beside valid_nll: on the NLL panel's axis it
    would flatten the NLL (about 0.5 against 30-100)."""
    from irbm.plotting.curves import _panels
    assert _panels(["valid_nll", "valid_nll_stderr", "log_z", "train_free_energy"]) == {
        "nll": ["valid_nll"], "log_z": ["log_z"], "free_energy": ["train_free_energy"]}


def test_ais_convergence_takes_the_run_itself(tmp_path):
    """An AISResult had to be unpacked by hand (an API review: a TypeError otherwise)."""
    model = random_model("rbm")
    result = irbm.ais.estimate_log_partition(model, 20, 30, base="model", seed=0,
                                             progress=False)
    figure = plotting.plot_ais_convergence(result, tmp_path / "ais.png")
    expected = irbm.ais.convergence_curve(result.log_weights)
    assert np.allclose(figure.axes[0].get_lines()[0].get_ydata(), expected[1])
    assert_non_trivial(tmp_path / "ais.png")
    with pytest.raises(ValueError, match="or an AISResult alone"):
        plotting.plot_ais_convergence([10, 20], [1.0, 2.0])


def test_the_ais_figure_names_its_run_and_the_highest_floor_without_flattening_the_curve(
        tmp_path, monkeypatch):
    """A cold review: the floor drawn was the weights' record's, not the run's highest (one 2.8
    nats above the estimate went unseen); a floor 47 nats below flattened the curve; a title
    named the temperatures of a record newer than the weights; titles were cut off."""
    from irbm.plotting import run
    record = {"n_chains": 100, "path": "linear:data", "base": "data", "n_betas": 128000,
              "model_file": "model.safetensors", "epoch": 1000, "model_sha256": "a"}
    assert run._ais_title(record, 100) == ("AIS estimate of ln Z (linear path, data base, "
                                           "128000 temperatures; latest model, epoch 1000)")
    assert run._ais_title(record, 4000) == "AIS estimate of ln Z"  # older weights
    assert run._ais_title({**record, "base": None}, 100).startswith(
        "AIS estimate of ln Z (linear path, 128000 temperatures;")
    monkeypatch.setattr(run.runs, "read_evaluations", lambda run_dir: [
        {"model_sha256": "a", "log_z_floor": 2191.08}, {"model_sha256": "b", "log_z_floor": 9e9},
        {"model_sha256": "a", "log_z_floor": 2243.09}, {"model_sha256": "a"}])
    assert run._highest_floor(tmp_path, record) == 2243.09
    # A nan floor would win max(); records of older versions name no model, so only the
    # weights' own floor is theirs (another model's was drawn, 17 nats above: a review).
    monkeypatch.setattr(run.runs, "read_evaluations", lambda run_dir: [
        {"model_sha256": "a", "log_z_floor": float("nan")},
        {"model_sha256": "a", "log_z_floor": 72.5}, {"model_sha256": "a", "log_z_floor": True}])
    assert run._highest_floor(tmp_path, record) == 72.5
    monkeypatch.setattr(run.runs, "read_evaluations", lambda run_dir: [
        {"log_z_floor": 90.0}, {"log_z_floor": 70.0}])
    assert run._highest_floor(tmp_path, {"log_z_floor": 70.0}) == 70.0
    monkeypatch.setattr(run.runs, "read_evaluations", lambda run_dir: [
        {"model_sha256": "a", "log_z_floor": True}])  # JSON true is no floor (1.0)
    assert run._highest_floor(tmp_path, record) is None
    curve = ([10, 100], [2240.0, 2240.3], [2239.5, 2240.0], [2240.4, 2240.6])
    above = plotting.plot_ais_convergence(*curve, floor=2243.09)
    assert any(line.get_label().startswith("certain floor") for line in above.axes[0].get_lines())
    below = plotting.plot_ais_convergence(*curve, floor=2193.0, title="x " * 60)
    axes = below.axes[0]
    assert not any(line.get_label().startswith("certain floor") for line in axes.get_lines())
    assert axes.get_ylim()[0] > 2230  # the curve keeps its scale
    assert any("certain floor of ln Z = 2193, below the estimates" in text
               for text in all_texts(below))
    assert "\n" in axes.get_title()  # a long title wraps, not cut at the edges
    # The same for an image figure a few images wide.
    narrow = plotting.image_grid(binary_data(4).numpy(), (4, 4), title="samples " * 12)
    assert "\n" in narrow._suptitle.get_text()


def test_stale_samples_are_titled_with_the_model_they_came_from(tmp_path, monkeypatch):
    from irbm.plotting import run
    model = random_model("rbm").float()
    irbm.save(model, tmp_path / "model.safetensors", extra={"epoch": 5})
    runs.write_json(tmp_path / runs.HISTORY_FILE, {"history": [], "size_history": []})
    np.savez(tmp_path / runs.SAMPLES_FILE, samples=binary_data(4).numpy().astype(np.uint8),
             model_file=np.array("best.safetensors"), epoch=np.array(3),
             n_steps=np.array(50), init=np.array("random"), z_max_init=np.array(False))
    titles = []
    original = run.plot_samples
    monkeypatch.setattr(run, "plot_samples", lambda *a, **o: titles.append(o["title"]) or
                        original(*a, **o))
    plotting.figures_for_run(tmp_path, TinyDataset())
    assert titles == ["RBM samples (50 Gibbs steps from noise, irbm sample; best model, "
                      "epoch 3)"]
