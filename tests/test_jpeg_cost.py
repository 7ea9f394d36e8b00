"""benchmarks.jpeg_cost's data handling: the same images out of two archives, its own archive, the recipe it runs."""

import numpy as np
import pytest

from benchmarks import jpeg_cost
from estimator.common import storage
from estimator.data import convert
from tests.cifar_archives import make_archive


def test_the_same_images_are_taken_from_the_full_archive_and_written_as_an_archive(tmp_path):
    _, full = make_archive(str(tmp_path / "full.tar.gz"), sizes=(5, 5, 5, 5, 5, 5))
    full = convert.read_archive(str(tmp_path / "full.tar.gz"))
    # The small archive: the first 2 or 3 images of each batch, the same labels, other pixels.
    real = {
        name: (255 - data[: 2 + i % 2], labels[: 2 + i % 2]) for i, (name, (data, labels)) in enumerate(full.items())
    }
    picked = jpeg_cost.same_images_from(full, real)
    for name, (data, labels) in picked.items():
        n = len(real[name][1])
        np.testing.assert_array_equal(data, full[name][0][:n])
        np.testing.assert_array_equal(labels, real[name][1])
    path = str(tmp_path / "picked.tar.gz")
    digest = jpeg_cost.write_archive(path, picked)
    assert digest == storage.file_digest(path, "sha256")
    back = convert.read_archive(path)  # the converter's own reader, with its checks
    assert sorted(back) == sorted(picked)
    for name in picked:
        np.testing.assert_array_equal(back[name][0], picked[name][0])
        np.testing.assert_array_equal(back[name][1], picked[name][1])


def test_other_images_are_refused(tmp_path):
    make_archive(str(tmp_path / "full.tar.gz"), sizes=(5, 5, 5, 5, 5, 5))
    full = convert.read_archive(str(tmp_path / "full.tar.gz"))
    real = {name: (data[:2], labels[:2]) for name, (data, labels) in full.items()}
    data, labels = real["test_batch"]
    real["test_batch"] = (data, (labels + 1) % 10)
    with pytest.raises(SystemExit, match="test_batch: the labels of the first 2 images differ"):
        jpeg_cost.same_images_from(full, real)


def test_patch_spectrum_of_flat_images_has_one_direction():
    # Every pixel 192: each 2x2 patch is the same vector of twelve 0.5s, so the (uncentred)
    # covariance has one eigenvalue, 12 x 0.25 = 3, and eleven zeros; over their mean, 12 and 0.
    spectrum = jpeg_cost.patch_spectrum(np.full((3, 3072), 192, np.uint8))
    np.testing.assert_allclose(spectrum, [0] * 11 + [12], atol=1e-9)
    rng = np.random.RandomState(0)
    noisy = jpeg_cost.patch_spectrum(rng.randint(0, 256, (20, 3072)).astype(np.uint8))
    assert noisy == sorted(noisy) and abs(np.mean(noisy) - 1) < 1e-9 and min(noisy) > 0.5  # white noise: flat


def test_the_recipe_runs_without_its_budget(tmp_path):
    recipe = tmp_path / "r.args"
    recipe.write_text("# a comment\n--network airbench\n--time-budget 5m\n  --time-budget=30m\n--seed 1\n\n")
    out = jpeg_cost.recipe_without_budget(str(recipe), str(tmp_path / "out.args"))
    assert open(out).read() == "# a comment\n--network airbench\n--seed 1\n\n"
    # --network auto chooses for a budget: without one it stands for the network named.
    recipe.write_text("--network auto\n--time-budget 5m\n--optimizer auto\n--network-auto-note\n")
    out = jpeg_cost.recipe_without_budget(str(recipe), str(tmp_path / "out.args"), "resnet")
    assert open(out).read() == "--network resnet\n--network-auto-note\n"
