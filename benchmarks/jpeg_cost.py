"""What the JPEG stand-in costs: one recipe trained on the same images, original pixels against JPEG-decoded ones.

    python -m benchmarks.jpeg_cost --work-dir work/jpeg_cost --recipe recipes/cpu_5min.args --epochs 40 --seeds 1 2

The full stand-in (``../shared/data/cifar-10-jpeg-python.tar.gz``) is decoded from a JPEG copy of
CIFAR-10 (quality 75, 4:2:0); the only original pixels here are the 6,102 images of the mini archive
(the first 1,017 of each batch). This takes the same 6,102 images out of the full stand-in (checking
that their labels agree), converts both into records, trains the recipe for a fixed number of epochs
on each (training and validation splits: 5,085 images; the recipe's ``--time-budget`` is dropped so
both train the same steps), and scores each final export on both test sets (1,017 images). It also
prints what the airbench network's whitening sees: the eigenvalues of the 2x2 patches' covariance,
relative to their mean, on each. Prints a table and writes JSON with the CPU.
"""

import argparse
import io
import os
import pickle
import shutil
import tarfile

import numpy as np

from benchmarks.common import print_machine, stop_trainers_on_sigterm, write_result
from benchmarks.recipes import REPO, run_recipe
from estimator.common import storage
from estimator.data import convert
from estimator.data import records as fmt

SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")


def same_images_from(full: dict, real: dict) -> dict:
    """The first images of each batch of ``full`` as many as ``real`` holds there, checked by their labels."""
    picked = {}
    for name, (_, labels) in real.items():
        full_data, full_labels = full[name]
        n = len(labels)
        if not np.array_equal(np.asarray(full_labels[:n]), np.asarray(labels)):
            raise SystemExit("%s: the labels of the first %d images differ: not the same images." % (name, n))
        picked[name] = (np.asarray(full_data[:n]), np.asarray(labels))
    return picked


def write_archive(path: str, batches: dict) -> str:
    """A CIFAR-10 python archive of ``batches`` (name -> (data, labels)); returns its sha256."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, (data, labels) in sorted(batches.items()):
            raw = pickle.dumps(
                {
                    b"batch_label": name.encode(),
                    b"labels": [int(x) for x in labels],
                    b"data": np.ascontiguousarray(data, dtype=np.uint8),
                    b"filenames": [b"%s_%05d" % (name.encode(), i) for i in range(len(labels))],
                },
                protocol=2,
            )
            info = tarfile.TarInfo("%s/%s" % (fmt.ARCHIVE_DIR, name))
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    with open(path, "wb") as f:
        f.write(out.getvalue())
    return storage.file_digest(path, "sha256")


def psnr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    mse = ((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean(axis=1)
    return 10 * np.log10(255.0**2 / np.maximum(mse, 1e-12))


def patch_spectrum(data: np.ndarray) -> list:
    """Eigenvalues of the 2x2 patches' uncentred covariance (the whitening's), over their mean."""
    x = data.reshape(-1, fmt.DEPTH, fmt.HEIGHT, fmt.WIDTH).transpose(0, 2, 3, 1) / 128.0 - 1.0
    patches = np.stack([x[:, i : i + 31, j : j + 31, :] for i in range(2) for j in range(2)], axis=3)
    flat = patches.reshape(-1, 4 * fmt.DEPTH)
    eigenvalues = np.linalg.eigvalsh(flat.T @ flat / len(flat))
    return [float(v) for v in eigenvalues / eigenvalues.mean()]


def recipe_without_budget(recipe: str, path: str, network: str = "airbench") -> str:
    """The recipe's flags without ``--time-budget`` (a fixed number of epochs is given instead), and with
    ``network`` for its ``--network auto``, which chooses for a budget and refuses to run without one; its
    ``--optimizer auto`` (the same) left out: SGD, which a budget of that many epochs chooses."""
    lines = []
    with open(recipe) as f:
        for line in f:
            flag = line.strip().replace("=", " ").split()
            if flag[:1] == ["--time-budget"] or flag == ["--optimizer", "auto"]:
                continue
            lines.append("--network %s\n" % network if flag == ["--network", "auto"] else line)
    with open(path, "w") as f:
        f.writelines(lines)
    return path


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real", default=os.path.join(SHARED, "cifar-10-mini-python.tar.gz"))
    parser.add_argument("--jpeg", default=os.path.join(SHARED, "cifar-10-jpeg-python.tar.gz"))
    parser.add_argument("--recipe", default="recipes/cpu_5min.args", help="A flag file under recipes/.")
    parser.add_argument(
        "--network", default="airbench", help="What the recipe's --network auto stands for (airbench94, width 1)."
    )
    parser.add_argument("--epochs", type=float, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--work-dir", required=True, help="Records, archives and jobs go here.")
    parser.add_argument("--out", default="benchmarks/results/jpeg_cost.json")
    return parser.parse_args(argv)


def pixel_stats(real: dict, jpeg: dict) -> dict:
    """How far the JPEG pixels are from the originals (median PSNR) and the 2x2 patches' spectra of both,
    printed: the JSON's ``pixels``."""
    original_pixels = np.concatenate([real[name][0] for name in sorted(real)])
    jpeg_pixels = np.concatenate([jpeg[name][0] for name in sorted(real)])
    pixels = {
        "images": int(len(original_pixels)),
        "median_psnr_db": float(np.median(psnr(original_pixels, jpeg_pixels))),
        "patch_eigenvalues_over_mean": {
            "original": patch_spectrum(original_pixels),
            "jpeg": patch_spectrum(jpeg_pixels),
        },
    }
    print("%d images, median PSNR of the JPEG pixels %.2f dB" % (pixels["images"], pixels["median_psnr_db"]))
    for name, values in pixels["patch_eigenvalues_over_mean"].items():
        print("  2x2 patch eigenvalues / mean, %-8s %s" % (name, " ".join("%.1e" % v for v in values)))
    return pixels


def train_and_score(flags_file, data_dirs: dict, pixels_name: str, seed: int, args) -> dict:
    """One fresh job of the recipe on ``pixels_name``'s records, its final export scored on both test sets."""
    from estimator.serving.predictor import score_records

    job = os.path.join(args.work_dir, "job_%s_seed%d" % (pixels_name, seed))
    shutil.rmtree(job, ignore_errors=True)  # a fresh job: an old checkpoint would be resumed
    row = run_recipe(flags_file, data_dirs[pixels_name], job, ["--train-epochs", str(args.epochs), "--seed", str(seed)])
    row.update(trained_on=pixels_name, seed=seed)
    for test_name, test_dir in data_dirs.items():
        labels, predicted = score_records(
            os.path.join(job, "export", "final"), os.path.join(test_dir, fmt.record_filename(fmt.TEST))
        )
        row["test_on_" + test_name] = float(np.mean(labels == predicted))
    print(
        "trained on %-8s seed %d  steps %4d  test on original %.4f  on jpeg %.4f  (own: flip %.4f, tta %.4f)"
        % (
            pixels_name,
            seed,
            row["global_step"],
            row["test_on_original"],
            row["test_on_jpeg"],
            row.get("accuracy_flip_tta", float("nan")),
            row.get("accuracy_tta", float("nan")),
        ),
        flush=True,
    )
    return row


def main(argv=None):
    args = parse_args(argv)
    stop_trainers_on_sigterm()
    print_machine()
    os.makedirs(args.work_dir, exist_ok=True)
    real = convert.read_archive(args.real)
    jpeg = same_images_from(convert.read_archive(args.jpeg), real)
    archive = os.path.join(args.work_dir, "same-images-jpeg.tar.gz")
    data_dirs = {"original": os.path.join(args.work_dir, "original"), "jpeg": os.path.join(args.work_dir, "jpeg")}
    convert.convert(data_dirs["original"], source=args.real, progress=False, log=lambda _: None)
    convert.convert(
        data_dirs["jpeg"], source=archive, sha256=write_archive(archive, jpeg), progress=False, log=lambda _: None
    )
    pixels = pixel_stats(real, jpeg)
    flags_file = recipe_without_budget(
        os.path.abspath(args.recipe), os.path.join(args.work_dir, "recipe.args"), args.network
    )
    rows = []
    for seed in args.seeds:
        for pixels_name in data_dirs:
            rows.append(train_and_score(flags_file, data_dirs, pixels_name, seed, args))
            write_result(args.out, {"recipe": args.recipe, "epochs": args.epochs, "pixels": pixels, "runs": rows})
    for name in data_dirs:
        own = [r["test_on_" + name] for r in rows if r["trained_on"] == name]
        print("trained and tested on %-8s mean %.4f over %d seeds" % (name, float(np.mean(own)), len(own)))


if __name__ == "__main__":
    main()
