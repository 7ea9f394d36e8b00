"""Fetches the CIFAR-10 archive into a local cache and verifies its checksum.

The download streams to ``NAME.part`` in the cache, shows a progress bar,
resumes a partial file with an HTTP ``Range`` request after a dropped
connection, retries with backoff, and only renames the file to ``NAME`` once
its checksum matches. Nothing opens the archive before that.
"""

from __future__ import annotations

import os
import time
from urllib.parse import urlparse

import requests
from tqdm import tqdm

from estimator.common import storage

CHUNK = 1 << 20  # for hashing
# Small network reads: a dropped connection loses at most the read in flight.
NET_CHUNK = 1 << 16


class DownloadError(Exception):
    """The archive could not be fetched, or did not verify."""


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cifar10-resnet-estimator")


def expected_checksum(md5=None, sha256=None):
    """Returns ``(algorithm, hex)`` or None, validating the hex string."""
    if md5 and sha256:
        raise ValueError("Give --md5 or --sha256, not both.")
    for algorithm, value, length in (("md5", md5, 32), ("sha256", sha256, 64)):
        if value:
            value = value.strip().lower()
            if len(value) != length or any(c not in "0123456789abcdef" for c in value):
                raise ValueError("--%s %r is not a %d-digit hex digest." % (algorithm, value, length))
            return algorithm, value
    return None


def verify(path: str, checksum) -> None:
    """Raises DownloadError naming the file if its checksum is not ``checksum``."""
    if checksum is None:
        return
    algorithm, want = checksum
    got = storage.file_digest(path, algorithm)
    if got != want:
        raise DownloadError(
            "Checksum mismatch for %s: %s is %s, expected %s. The file is corrupt or "
            "not the archive you meant; pass the right --%s or --source." % (path, algorithm, got, want, algorithm)
        )


def is_url(source: str) -> bool:
    return urlparse(source).scheme in ("http", "https")


def fetch(
    source: str,
    cache_dir=None,
    checksum=None,
    retries: int = 5,
    timeout: float = 60.0,
    backoff: float = 1.0,
    progress: bool = True,
) -> str:
    """Returns the local path of a verified archive.

    Args:
      source: an http(s) URL, a ``file://`` URL or a local path.
      cache_dir: where downloads go (default: ``~/.cache/cifar10-resnet-estimator``).
      checksum: ``(algorithm, hex)`` from ``expected_checksum``, or None.
      retries: how many failed requests to retry before giving up.
      timeout: seconds to wait for the server on each read.
      backoff: first delay between retries in seconds (doubles each time).
      progress: show a progress bar.

    Raises:
      DownloadError: the archive is missing, cannot be fetched, or does not verify.
    """
    if not is_url(source):
        path = urlparse(source).path if source.startswith("file://") else source
        if not os.path.isfile(path):
            raise DownloadError("Source archive %s does not exist." % path)
        verify(path, checksum)
        return path

    cache_dir = cache_dir or default_cache_dir()
    os.makedirs(cache_dir, exist_ok=True)
    name = os.path.basename(urlparse(source).path) or "cifar-10-python.tar.gz"
    final = os.path.join(cache_dir, name)
    if os.path.exists(final):
        try:
            verify(final, checksum)
            return final
        except DownloadError:
            os.remove(final)  # a stale or foreign file under our name: fetch again
    part = final + ".part"
    _download_with_retries(source, part, retries, timeout, backoff, progress)
    try:
        verify(part, checksum)
    except DownloadError:
        os.remove(part)  # a wrong file must not be resumed next time
        raise
    os.replace(part, final)
    return final


def _download_with_retries(source: str, part: str, retries: int, timeout: float, backoff: float, progress: bool):
    """``_download_into`` until it completes, retrying failed requests with doubling delays."""
    failures = 0
    while True:
        try:
            if _download_into(source, part, timeout, progress):
                return
        except (requests.RequestException, OSError) as e:
            failures += 1
            if failures > retries:
                raise DownloadError(
                    "Could not download %s after %d attempts: %s. Check the network, "
                    "or pass --source with a local copy." % (source, failures, e)
                ) from e
            time.sleep(backoff * 2 ** (failures - 1))


def _download_into(url: str, part: str, timeout: float, progress: bool) -> bool:
    """Fetches the rest of ``url`` into ``part``; True once it is complete."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    headers = {"Range": "bytes=%d-" % have} if have else {}
    with requests.get(url, headers=headers, stream=True, timeout=timeout) as response:
        if response.status_code == 416 and have:
            return True  # the partial file already holds every byte
        if response.status_code == 404:
            raise DownloadError("%s: 404 Not Found. Check --source." % url)
        response.raise_for_status()
        if response.status_code == 206:
            mode = "ab"
        else:  # the server ignored the range: start over
            mode, have = "wb", 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        with (
            open(part, mode) as out,
            tqdm(
                total=total,
                initial=have,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=os.path.basename(part[: -len(".part")]),
                disable=not progress,
            ) as bar,
        ):
            for chunk in response.iter_content(NET_CHUNK):
                out.write(chunk)
                bar.update(len(chunk))
        size = os.path.getsize(part)
        if total is not None and size < total:
            raise requests.ConnectionError("connection dropped at byte %d of %d" % (size, total))
    return True
