"""Writes small CIFAR-10 archives in the official format, for tests.

Pickles can be written as Python 2 wrote the official files (protocol 2,
byte strings as ``SHORT_BINSTRING``), as Python 3 re-pickles them (protocols
2 to 5), or with numpy 2.x's module names (``numpy._core.*``), so the converter
is tested against every structure it must accept.
"""

import hashlib
import io
import pickle
import tarfile

import numpy as np

from estimator.data import records as fmt
from estimator.data.convert import _numpy_attr

BATCH_NAMES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch")


class _StylePickler(pickle._Pickler):
    """The pure-Python pickler, able to write Python 2 strings and numpy 2 names."""

    def __init__(self, file, protocol, py2=False, numpy2=False):
        super().__init__(file, protocol)
        self.py2 = py2
        self.renames = {}
        if numpy2:
            rec = _numpy_attr("_reconstruct", "numpy.core.multiarray")
            frombuf = _numpy_attr("_frombuffer", "numpy.core.numeric")
            self.renames = {rec: "numpy._core.multiarray", frombuf: "numpy._core.numeric"}

    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2_str(self, obj):
        if not self.py2:
            return pickle._Pickler.save_bytes(self, obj)
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + n.to_bytes(4, "little") + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str

    def save_global(self, obj, name=None):
        module = self.renames.get(obj)
        if module is None:
            return super().save_global(obj, name)
        if self.proto >= 4:
            self.save(module)
            self.save(obj.__name__)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + module.encode() + b"\n" + obj.__name__.encode() + b"\n")
        self.memoize(obj)


STYLES = ("py2", "py3-p2", "py3-p3", "py3-p4", "py3-p5", "np2-p2", "np2-p4", "np2-p5")


def dump(obj, style="py2") -> bytes:
    """Pickles ``obj`` in one of ``STYLES``."""
    kind, _, proto = style.partition("-")
    protocol = 2 if kind == "py2" else int(proto[1:])
    out = io.BytesIO()
    _StylePickler(out, protocol, py2=kind == "py2", numpy2=kind == "np2").dump(obj)
    return out.getvalue()


def make_batch(n, seed, labels=None):
    """A batch dict with bytes keys, as in the official files."""
    rng = np.random.RandomState(seed)
    data = rng.randint(0, 256, size=(n, fmt.IMAGE_BYTES)).astype(np.uint8)
    if labels is None:
        labels = [int(x) for x in rng.randint(0, fmt.NUM_CLASSES, size=n)]
    return {
        b"batch_label": b"batch %d" % seed,
        b"labels": labels,
        b"data": data,
        b"filenames": [b"img_%d_%d.png" % (seed, i) for i in range(n)],
    }


def write_tar(path, members):
    """Writes a .tar.gz of ``members``: a list of (TarInfo, bytes or None)."""
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is None:
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def file_member(name, data):
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    return info, data


def official_members(batches, style="py2", pickled=None):
    """Members of an official-layout archive; ``pickled`` overrides raw bytes per batch."""
    pickled = pickled or {}
    directory = tarfile.TarInfo(fmt.ARCHIVE_DIR)
    directory.type = tarfile.DIRTYPE
    directory.mode = 0o755
    members = [(directory, None)]
    meta = {b"num_cases_per_batch": 10000, b"label_names": [b"airplane"] * 10, b"num_vis": 3072}
    members.append(file_member(fmt.ARCHIVE_DIR + "/batches.meta", dump(meta, style)))
    for name, batch in batches.items():
        raw = pickled.get(name)
        if raw is None:
            raw = dump(batch, style)
        members.append(file_member(fmt.ARCHIVE_DIR + "/" + name, raw))
    members.append(file_member(fmt.ARCHIVE_DIR + "/readme.html", b"<html></html>"))
    return members


def make_archive(path, sizes=(3, 2, 4, 1, 5, 3), style="py2"):
    """Writes an official-layout archive; returns (sha256, batches by name)."""
    batches = {name: make_batch(n, seed=i + 1) for i, (name, n) in enumerate(zip(BATCH_NAMES, sizes))}
    return write_tar(path, official_members(batches, style)), batches
