"""Fetches the CIFAR-10 archive into a local cache and verifies its checksum.

``pooch`` (the downloader of scipy and scikit-image) streams it with a progress bar and moves the file into the
cache only once its checksum matches: nothing opens the archive before that. A failed transfer is tried again after
a growing pause; a file that does not verify is not.
"""

from __future__ import annotations

import os
import time
from urllib.parse import urlparse

import pooch
import requests

from estimator.common import storage


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
            "Checksum mismatch for %s: %s is %s, expected %s: pass the right one." % (path, algorithm, got, want)
        )


def is_url(source: str) -> bool:
    return urlparse(source).scheme in ("http", "https")


def fetch(source: str, cache_dir=None, checksum=None, retries: int = 5, progress: bool = True) -> str:
    """Returns the local path of a verified archive.

    Args:
      source: an http(s) URL, a ``file://`` URL or a local path.
      cache_dir: where downloads go (default: ``~/.cache/cifar10-resnet-estimator``).
      checksum: ``(algorithm, hex)`` from ``expected_checksum``, or None.
      retries: how many failed transfers to retry before giving up.
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
    name = os.path.basename(urlparse(source).path) or "cifar-10-python.tar.gz"
    known = "%s:%s" % checksum if checksum else None
    for attempt in range(retries + 1):  # a network error is tried again; a wrong file is not
        try:
            return pooch.retrieve(source, known, name, cache_dir or default_cache_dir(), progressbar=progress)
        except ValueError as e:  # pooch deleted the download that did not verify
            got = str(e).split(":")[0]
            raise DownloadError(
                "Checksum mismatch for %s: %s, expected %s: pass the right one." % (source, got, checksum[1])
            ) from None
        except requests.RequestException as e:
            if attempt == retries:
                raise DownloadError(
                    "Could not download %s after %d attempts: %s: pass --source with a local copy."
                    % (source, retries + 1, e)
                ) from e
            time.sleep(attempt + 1)
