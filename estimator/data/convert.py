"""Converts the CIFAR-10 python archive into train/validation/eval TFRecords.

The archive is untrusted input: its batches are pickles, and ``pickle.load`` on
a hostile file runs code. So the archive is read in memory (never extracted to
disk), every member is checked (inside ``cifar-10-batches-py/``, a regular file,
no links or devices), and batches are unpickled by an unpickler that can only
build what a CIFAR batch holds: dicts, lists, bytes, ints and uint8 numpy
arrays. Any problem raises ``ConversionError`` naming the file and what is
wrong, and leaves no ``*.tfrecords`` behind.

Output files are written under temporary names and renamed (or uploaded and
verified, for ``gs://``) only once every split has been written; a manifest
(counts, sizes, sha256, source checksum) is written last and marks a complete
conversion.
"""

from __future__ import annotations

import argparse
import codecs
import importlib
import io
import json
import os
import pickle
import posixpath
import shutil
import sys
import tarfile
import tempfile
import zlib

import numpy as np

from estimator.common import logs, storage
from estimator.common.failures import storage_failure
from estimator.data import download
from estimator.data import records as fmt


class ConversionError(Exception):
    """The archive or the output directory cannot be used; nothing was written."""


# ---------------------------------------------------------------------------
# Restricted unpickling


def _numpy_attr(name: str, *modules: str):
    """First of ``numpy.<module>.<name>`` that this numpy has (1.x or 2.x names)."""
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError("numpy has none of %s" % ", ".join(m + "." + name for m in modules))


def _reconstruct(subtype, shape, dtype_code):
    # numpy's array constructor for pickles; only plain ndarrays are allowed
    # (a subclass such as numpy.ma.MaskedArray is not part of a CIFAR batch).
    if subtype is not np.ndarray:
        raise pickle.UnpicklingError("array subtype %r is not allowed" % (subtype,))
    return _numpy_attr("_reconstruct", "numpy._core.multiarray", "numpy.core.multiarray")(subtype, shape, dtype_code)


def _frombuffer(buffer, dtype, shape, order):
    return _numpy_attr("_frombuffer", "numpy._core.numeric", "numpy.core.numeric")(buffer, dtype, shape, order)


def _latin1_encode(text, encoding="latin1"):
    # Python 3 pickles bytes at protocol 2 as _codecs.encode(str, 'latin1').
    # Any other codec (zlib, base64, rot13 ...) is not how bytes are stored.
    if codecs.lookup(encoding).name != "iso8859-1" or not isinstance(text, str):
        raise pickle.UnpicklingError("_codecs.encode with %r is not allowed" % (encoding,))
    return text.encode("latin1")


# (module, name) -> what to build. numpy 1.x writes numpy.core.*, numpy 2.x
# writes numpy._core.*; both map to whatever the installed numpy provides.
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("_codecs", "encode"): _latin1_encode,
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                "it references %s.%s, which a CIFAR-10 batch never needs" % (module, name)
            ) from None


_PLAIN_TYPES = (dict, list, bytes, str, int)


def _check_plain(obj, name: str, depth: int = 0) -> None:
    """Refuses anything but what a batch is made of, wherever it sits in the pickle."""
    if depth > 3:
        raise ConversionError("%s is not a CIFAR-10 batch: nested too deeply." % name)
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise ConversionError("%s: holds an array of Python objects." % name)
        return
    if type(obj) not in _PLAIN_TYPES:
        raise ConversionError(
            "Refusing %s: it holds a %s, which a CIFAR-10 batch never holds." % (name, type(obj).__name__)
        )
    if isinstance(obj, dict):
        for key, value in obj.items():
            _check_plain(key, name, depth + 1)
            _check_plain(value, name, depth + 1)
    elif isinstance(obj, list):
        for value in obj:
            _check_plain(value, name, depth + 1)


def load_batch(raw: bytes, name: str):
    """Safely unpickles one batch and checks its structure.

    Args:
      raw: the pickle bytes of a batch file.
      name: the file's name, for error messages.

    Returns:
      ``(data, labels)``: a ``(N, 3072)`` uint8 array and an ``(N,)`` int64 array.

    Raises:
      ConversionError: the pickle is unsafe or not a CIFAR-10 batch.
    """
    try:
        # encoding='bytes' keeps Python 2 str (the official files) as bytes.
        batch = _BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as e:  # any failure of an untrusted pickle is a refusal
        raise ConversionError("Refusing %s: unsafe or corrupt pickle: %s." % (name, e)) from e
    _check_plain(batch, name)
    if not isinstance(batch, dict):
        raise ConversionError("%s is not a CIFAR-10 batch: a %s, not a dict." % (name, type(batch).__name__))
    entries = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    for key in ("data", "labels"):
        if key not in entries:
            raise ConversionError("%s is not a CIFAR-10 batch: it has no %r entry." % (name, key))
    data, labels = entries["data"], entries["labels"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise ConversionError(
            "%s: 'data' must be a 2-D uint8 array, got %s." % (name, getattr(data, "dtype", type(data).__name__))
        )
    if data.shape[1] != fmt.IMAGE_BYTES:
        raise ConversionError(
            "%s: rows are %d bytes, a CIFAR-10 image is %d (32x32x3)." % (name, data.shape[1], fmt.IMAGE_BYTES)
        )
    if not isinstance(labels, (list, tuple)) or not all(type(x) is int for x in labels):
        raise ConversionError("%s: 'labels' must be a list of ints." % name)
    if len(labels) != data.shape[0]:
        raise ConversionError("%s: %d labels for %d images." % (name, len(labels), data.shape[0]))
    if not labels:
        raise ConversionError("%s holds no images." % name)
    labels = np.asarray(labels, dtype=np.int64)
    bad = np.flatnonzero((labels < 0) | (labels >= fmt.NUM_CLASSES))
    if bad.size:
        raise ConversionError(
            "%s: label %d at row %d is outside 0..%d." % (name, labels[bad[0]], bad[0], fmt.NUM_CLASSES - 1)
        )
    return np.ascontiguousarray(data), labels


# ---------------------------------------------------------------------------
# Reading the archive


def _check_member(member: tarfile.TarInfo, archive: str) -> None:
    name = member.name
    parts = name.split("/")
    if name.startswith("/") or posixpath.isabs(name) or ".." in parts:
        raise ConversionError("Refusing %s: member %r has an unsafe path." % (archive, name))
    if parts[0] != fmt.ARCHIVE_DIR:
        raise ConversionError("Refusing %s: member %r is outside %s/." % (archive, name, fmt.ARCHIVE_DIR))
    if member.isdir() and posixpath.normpath(name) == fmt.ARCHIVE_DIR:
        return
    if not member.isreg():
        kind = (
            "a symbolic link"
            if member.issym()
            else "a hard link"
            if member.islnk()
            else "a device"
            if member.isdev()
            else "a directory"
            if member.isdir()
            else "not a regular file"
        )
        raise ConversionError("Refusing %s: member %r is %s." % (archive, name, kind))


def read_archive(path: str) -> dict:
    """Reads every batch of a CIFAR-10 python archive, in memory.

    Returns:
      batch name (e.g. ``data_batch_1``) -> ``(data, labels)``.

    Raises:
      ConversionError: the archive is corrupt, truncated, unsafe, or lacks a batch.
    """
    wanted = {n for names in fmt.SPLITS.values() for n in names}
    raw = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            # One pass: check each member and keep the batches' bytes. Reading
            # to the end also detects a truncated archive before any unpickling.
            for member in tar:
                _check_member(member, path)
                base = posixpath.basename(member.name)
                if member.isreg() and posixpath.dirname(member.name) == fmt.ARCHIVE_DIR and base in wanted:
                    if base in raw:
                        raise ConversionError("Refusing %s: %r appears twice." % (path, member.name))
                    raw[base] = tar.extractfile(member).read()
    except ConversionError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        raise ConversionError(
            "Cannot read %s: truncated or not a gzip'd tar archive (%s). Delete it and download again." % (path, e)
        ) from e
    missing = sorted(wanted - set(raw))
    if missing:
        names = ", ".join(fmt.ARCHIVE_DIR + "/" + m for m in missing)
        raise ConversionError("%s has no %s: not a complete CIFAR-10 python archive." % (path, names))
    return {name: load_batch(data, "%s:%s/%s" % (path, fmt.ARCHIVE_DIR, name)) for name, data in raw.items()}


# ---------------------------------------------------------------------------
# Writing records


def _write_records(path: str, data: np.ndarray, labels: np.ndarray) -> dict:
    import tensorflow as tf  # only to write: the archive is fetched and checked without its import (seconds)

    with tf.io.TFRecordWriter(path) as writer:
        for row, label in zip(data, labels):
            writer.write(fmt.encode_example(row.tobytes(), int(label)))
    return {"examples": int(len(labels)), "bytes": os.path.getsize(path), "sha256": storage.file_digest(path, "sha256")}


def existing_manifest(data_dir: str):
    """The manifest of a complete earlier conversion in ``data_dir``, or None."""
    try:
        manifest = fmt.read_manifest(data_dir)
    except ValueError:
        return None
    if manifest is None:
        return None
    for name, entry in manifest["files"].items():
        if storage.size(storage.join(data_dir, name)) != int(entry["bytes"]):
            return None
    return manifest


def convert(
    data_dir: str,
    source: str = fmt.OFFICIAL_URL,
    md5=None,
    sha256=None,
    cache_dir=None,
    overwrite: bool = False,
    progress: bool = True,
    log=print,
) -> dict:
    """Fetches, verifies and converts the archive; returns the manifest.

    Args:
      data_dir: local directory or ``gs://bucket/path`` for the records.
      source: URL or local path of ``cifar-10-python.tar.gz``.
      md5, sha256: the archive's expected checksum (at most one). The official
        md5 is the default when ``source`` is the official URL.
      cache_dir: local directory for downloads.
      overwrite: rebuild even if ``data_dir`` holds a complete conversion.
      progress: show a download progress bar.
      log: called with one line per milestone.

    Raises:
      ConversionError: bad input; nothing was written to ``data_dir``.
    """
    if not overwrite:
        manifest = existing_manifest(data_dir)
        if manifest is not None:
            log(
                "%s already holds complete CIFAR-10 records (%s); nothing to do. "
                "Pass --overwrite to rebuild." % (data_dir, fmt.MANIFEST_NAME)
            )
            return manifest
    checksum = _checksum(source, md5, sha256, log)
    try:
        archive = download.fetch(source, cache_dir=cache_dir, checksum=checksum, progress=progress)
    except download.DownloadError as e:
        raise ConversionError(str(e)) from e
    log("Reading %s" % archive)
    batches = read_archive(archive)
    source_info = {"source": source, "archive_sha256": storage.file_digest(archive, "sha256")}
    if checksum is not None:
        source_info["verified_" + checksum[0]] = checksum[1]
    manifest = _publish(data_dir, batches, source_info, log)
    log("Wrote %s" % ", ".join(storage.join(data_dir, fmt.record_filename(s)) for s in fmt.SUBSETS))
    return manifest


def _checksum(source: str, md5, sha256, log):
    """``(kind, hex)`` the archive must match: the one given, the official md5 for the official URL, or
    None (said in a warning: the contents are still checked)."""
    try:
        checksum = download.expected_checksum(md5, sha256)
    except ValueError as e:
        raise ConversionError(str(e)) from e
    if checksum is None and source == fmt.OFFICIAL_URL:
        checksum = ("md5", fmt.OFFICIAL_MD5)
    if checksum is None:
        log(
            "warning: no --md5 or --sha256 given for %s: its checksum is not verified "
            "(its contents still are)." % source
        )
    return checksum


def _publish(data_dir: str, batches, source_info: dict, log) -> dict:
    """Writes every split to a staging directory, then publishes them and the manifest (last): a failure
    leaves nothing, and the old manifest never vouches for new files. Returns the manifest."""
    local = not storage.is_gcs(data_dir)
    if local:
        try:
            os.makedirs(data_dir, exist_ok=True)
        except OSError as e:
            raise ConversionError("Cannot create --data-dir %s: %s." % (data_dir, e)) from e
    stage = tempfile.mkdtemp(prefix=".cifar10-staging-", dir=data_dir if local else None)
    try:
        files = {}
        for subset, names in fmt.SPLITS.items():
            data = np.concatenate([batches[n][0] for n in names])
            labels = np.concatenate([batches[n][1] for n in names])
            files[subset] = _write_records(os.path.join(stage, fmt.record_filename(subset)), data, labels)
            log("  %-10s %6d images from %s" % (subset, files[subset]["examples"], ", ".join(names)))
        manifest = fmt.make_manifest(files, source_info)

        manifest_path = storage.join(data_dir, fmt.MANIFEST_NAME)
        storage.remove(manifest_path)  # the old manifest must not vouch for new files
        for subset in fmt.SUBSETS:
            name = fmt.record_filename(subset)
            if local:
                os.replace(os.path.join(stage, name), os.path.join(data_dir, name))
            else:
                storage.upload_file(os.path.join(stage, name), storage.join(data_dir, name))
        storage.write_text(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return manifest


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Download CIFAR-10 (python version), verify it and write train/validation/eval TFRecords."
    )
    parser.add_argument("--data-dir", required=True, help="Directory (or gs://bucket/path) to write the TFRecords to.")
    parser.add_argument(
        "--source",
        default=fmt.OFFICIAL_URL,
        help="URL or local path of cifar-10-python.tar.gz (default: the official URL).",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--md5", help="Expected md5 of the archive (default: the official md5 when --source is the official URL)."
    )
    group.add_argument("--sha256", help="Expected sha256 of the archive.")
    parser.add_argument(
        "--cache-dir", default=None, help="Where downloads are kept (default: %s)." % download.default_cache_dir()
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="Rebuild even if --data-dir already holds complete records."
    )
    parser.add_argument("--no-progress", action="store_true", help="Hide the download progress bar.")
    return parser


def main(argv=None) -> int:
    logs.quiet_imports(argv)  # the console script comes here first
    args = build_parser().parse_args(argv)
    try:
        convert(
            args.data_dir,
            source=args.source,
            md5=args.md5,
            sha256=args.sha256,
            cache_dir=args.cache_dir,
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )
    except ConversionError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        failure = storage_failure(e)
        if failure is None:
            raise
        print("error: %s" % failure, file=sys.stderr)  # a full or read-only data dir: one line
        return 74
    return 0
