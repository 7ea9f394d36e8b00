"""A recipe with its records and job dir on Cloud Storage, and the same on local disk, side by side.

    python -m benchmarks.cloud_storage --source ../shared/data/cifar-10-jpeg-python.tar.gz --sha256 HEX \\
        recipes/cpu_5min.args [--rounds N] [-- <trainer flags>]

Cloud Storage is gcp-storage-emulator on loopback behind ``tests/cloud_storage.py``'s TLS front, which both of
the package's clients reach as a Vertex AI job reaches the real one: TensorFlow's own for the records,
checkpoints, summaries and exports, google-cloud-storage for the manifest, ``hparams.json``, ``results.json``
and the probes' cache. So this measures what the job does about remote storage (its reserve for checkpoint
writes, records read through TensorFlow's client, the whole command within its budget), not Cloud Storage's
own latencies. ``generate_cifar10_tfrecords.py`` converts the archive to both places (timed, the whole
command); each job is a first run (an empty ``--probe-cache`` of its own), the two places alternating which
goes first from round to round. On ``gs://`` it counts what TensorFlow's client sent for the job (the front's
ledger): all of it, and the event files' part (sent whole at each flush). Prints a table and writes JSON.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.common import print_machine, stop_trainers_on_sigterm, write_result
from benchmarks.recipes import REPO, run_recipe
from estimator.common import processes
from tests import cloud_storage

BUCKET = "benchmark"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cloud_storage",
        description=__doc__.split("\n")[0],
        usage="%(prog)s --source ARCHIVE --sha256 HEX [--rounds N] [--out JSON] RECIPE... [-- <trainer flags>]",
    )
    parser.add_argument("recipes", nargs="+", help="Flag files under recipes/.")
    parser.add_argument("--source", required=True, help="A CIFAR-10 archive in the official format.")
    parser.add_argument("--sha256", required=True, help="The archive's sha256.")
    parser.add_argument("--rounds", type=int, default=1, help="Runs of each recipe in each place.")
    parser.add_argument("--out", default="benchmarks/results/cloud_storage.json")
    return parser


def convert(data_dir: str, source: str, sha256: str) -> float:
    """Seconds the documented conversion command takes to write ``data_dir``'s records."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "generate_cifar10_tfrecords.py", "--data-dir", data_dir, "--source", source]
        + ["--sha256", sha256, "--no-progress"],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return round(time.perf_counter() - start, 1)


def sent(directory: str, job_object: str) -> dict:
    """What TensorFlow's client uploaded for the job whose objects start with ``job_object`` (BUCKET/NAME/)."""
    entries = cloud_storage.uploads(directory, job_object)
    events = [size for name, size in entries if "/events.out.tfevents." in name]
    return {
        "uploaded_mb": round(sum(size for _, size in entries) / 1e6, 1),
        "event_file_uploads": len(events),
        "event_file_mb": round(sum(events) / 1e6, 1),
    }


def _line(row: dict) -> str:
    return (
        "%-7s %-22s round %d  %-22s %-5s steps %5d  wall %6.1f s  test acc %.4f  checkpoint save %5.2f s  "
        "end reserved %5.1f s, used %5.1f s"
        % tuple(
            row[key]
            for key in (
                "place",
                "recipe",
                "round",
                "network",
                "precision",
                "global_step",
                "wall_seconds",
                "accuracy",
                "checkpoint_save_secs",
                "final_secs_reserved",
                "final_secs",
            )
        )
        + (_uploads(row) if "uploaded_mb" in row else "")
    )


def _uploads(row: dict) -> str:
    return "  uploaded %(uploaded_mb)5.1f MB, event files %(event_file_mb)4.1f MB in %(event_file_uploads)d" % row


def main(argv=None) -> int:
    argv, extra = processes.split_argv(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from google.cloud import storage as gcs

    stop_trainers_on_sigterm()
    print_machine()
    source = os.path.abspath(args.source)
    with tempfile.TemporaryDirectory() as tmp:
        with cloud_storage.running(tmp) as environment:
            os.environ.update(environment)  # the trainers and the conversion inherit it
            gcs.Client(project="benchmark").create_bucket(BUCKET)
            places = {"gs://": "gs://%s" % BUCKET, "local": os.path.join(tmp, "local")}
            converts = {place: convert(root + "/cifar-10-data", source, args.sha256) for place, root in places.items()}
            rows = []
            for round_ in range(args.rounds):
                for recipe in args.recipes:
                    order = list(places) if round_ % 2 == 0 else list(places)[::-1]
                    for place in order:
                        root = places[place]
                        name = "%s-%d" % (os.path.splitext(os.path.basename(recipe))[0], round_ + 1)
                        cache = tempfile.mkdtemp(dir=tmp)
                        row = run_recipe(
                            os.path.abspath(recipe),
                            root + "/cifar-10-data",
                            root + "/jobs/" + name,
                            list(extra) + ["--probe-cache", cache],
                        )
                        row.update(place=place, round=round_ + 1)
                        if place == "gs://":
                            row.update(sent(tmp, "%s/jobs/%s/" % (BUCKET, name)))
                        rows.append(row)
                        print(_line(row), flush=True)
    print("conversion: %s" % ", ".join("%s %.1f s" % item for item in converts.items()))
    write_result(args.out, {"source": args.source, "convert_seconds": converts, "runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
