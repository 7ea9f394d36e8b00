"""Reads and writes the package's own files, on local disk or on Cloud Storage.

Everything this package itself reads or writes (the converter's records and
manifest, ``hparams.json``, ``results.json``) goes through here. ``gs://``
paths use ``google-cloud-storage``, which honours ``STORAGE_EMULATOR_HOST``, so
the same code runs against the real service and against a local emulator in
tests. (Checkpoints and summaries are the Estimator's, written by TensorFlow's
own file system, which has no endpoint setting: tests/cloud_storage.py reaches
the same emulator through a TLS front on loopback.)

Writes are atomic: a local file is written under a temporary name in the same
directory and renamed; a Cloud Storage object only appears once its upload has
completed, and uploads are checked against the local MD5 afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile

GCS_PREFIX = "gs://"
_client_cache = []


def is_gcs(path: str) -> bool:
    return str(path).startswith(GCS_PREFIX)


def join(base: str, *names: str) -> str:
    if is_gcs(base):
        return "/".join([base.rstrip("/")] + [n.strip("/") for n in names])
    return os.path.join(base, *names)


def split_gcs(path: str):
    """``gs://bucket/a/b`` -> ``("bucket", "a/b")``."""
    if not is_gcs(path):
        raise ValueError("Not a gs:// path: %r" % path)
    bucket, _, name = path[len(GCS_PREFIX) :].partition("/")
    if not bucket:
        raise ValueError("%r names no bucket: use gs://BUCKET/PATH." % path)
    return bucket, name


def _client():
    if not _client_cache:
        from google.cloud import storage as gcs  # loaded by the first gs:// path only

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            # The emulator needs no credentials; the library would otherwise
            # look for Application Default Credentials and fail.
            from google.auth.credentials import AnonymousCredentials

            client = gcs.Client(
                project=os.environ.get("GOOGLE_CLOUD_PROJECT", "local-emulator"), credentials=AnonymousCredentials()
            )
        else:
            client = gcs.Client()
        _client_cache.append(client)
    return _client_cache[0]


def blob(path: str):
    """The ``google-cloud-storage`` blob of a ``gs://`` path (also for generation preconditions)."""
    bucket, name = split_gcs(path)
    if not name:
        raise ValueError("%r names a bucket, not an object." % path)
    return _client().bucket(bucket).blob(name)


def exists(path: str) -> bool:
    if is_gcs(path):
        return blob(path).exists()
    return os.path.exists(path)


def size(path: str):
    """Size in bytes, or None if there is no such file."""
    if is_gcs(path):
        bucket, name = split_gcs(path)
        found = _client().bucket(bucket).get_blob(name)
        return None if found is None else int(found.size)
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def read_bytes(path: str) -> bytes:
    if is_gcs(path):
        return blob(path).download_as_bytes()
    with open(path, "rb") as f:
        return f.read()


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def makedirs(path: str) -> None:
    """Creates a local directory; Cloud Storage has no directories."""
    if not is_gcs(path):
        os.makedirs(path, exist_ok=True)


def remove(path: str) -> None:
    """Removes a file if it exists."""
    if is_gcs(path):
        obj = blob(path)
        if obj.exists():
            obj.delete()
    elif os.path.exists(path):
        os.remove(path)


def _write_local(path: str, write) -> None:
    """Calls ``write(file)`` on a temporary file beside ``path``, then renames it into place."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
        # mkstemp creates 0600 files; give the result the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def file_digest(local_path: str, algorithm: str) -> str:
    """The hex digest (``md5``, ``sha256`` ...) of a local file, read in 1 MiB chunks."""
    digest = hashlib.new(algorithm)
    with open(local_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def upload_file(local_path: str, path: str) -> None:
    """Copies a local file to ``path`` atomically, verifying a Cloud Storage upload."""
    if is_gcs(path):
        obj = blob(path)
        obj.upload_from_filename(local_path)
        obj.reload()
        expected = base64.b64encode(bytes.fromhex(file_digest(local_path, "md5"))).decode("ascii")
        if obj.md5_hash != expected or int(obj.size) != os.path.getsize(local_path):
            obj.delete()
            raise OSError(
                "Upload of %s to %s did not verify (md5 %s): removed it; run again." % (local_path, path, obj.md5_hash)
            )
        return

    def copy(out):
        with open(local_path, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)

    _write_local(path, copy)


def write_bytes(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically."""
    if is_gcs(path):
        obj = blob(path)
        obj.upload_from_string(data)
        return
    _write_local(path, lambda out: out.write(data))


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
