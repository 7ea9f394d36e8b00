"""The download path, against a real HTTP server on 127.0.0.1."""

import hashlib
import http.server
import os
import threading

import pytest

from estimator.data import download
from estimator.data.convert import ConversionError, convert
from tests import cifar_archives as ca


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server
        server.requests.append(dict(self.headers))
        if self.path != "/cifar-10-python.tar.gz":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        rest = server.body
        self.send_response(200)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        if server.drops:
            # Send part of the body, then drop the connection.
            server.drops -= 1
            self.wfile.write(rest[: len(rest) // 3])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(rest)


@pytest.fixture
def server(tmp_path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    sha, batches = ca.make_archive(str(tmp_path / "src.tar.gz"), sizes=(40, 30, 20, 10, 25, 15))
    httpd.body = (tmp_path / "src.tar.gz").read_bytes()
    httpd.sha256, httpd.md5 = sha, hashlib.md5(httpd.body).hexdigest()
    httpd.batches, httpd.requests, httpd.drops = batches, [], 0
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    httpd.url = "http://127.0.0.1:%d/cifar-10-python.tar.gz" % httpd.server_address[1]
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_download_verifies_and_caches(server, tmp_path):
    cache = str(tmp_path / "cache")
    path = download.fetch(server.url, cache, ("md5", server.md5), progress=False)
    assert open(path, "rb").read() == server.body
    assert os.listdir(cache) == ["cifar-10-python.tar.gz"]
    download.fetch(server.url, cache, ("md5", server.md5), progress=False)
    assert len(server.requests) == 1  # the verified cache is reused


def test_a_dropped_connection_is_retried_and_the_download_verified(server, tmp_path):
    server.drops = 1
    path = download.fetch(server.url, str(tmp_path / "c"), ("sha256", server.sha256), progress=False)
    assert open(path, "rb").read() == server.body and len(server.requests) == 2
    assert os.listdir(str(tmp_path / "c")) == ["cifar-10-python.tar.gz"]  # nothing half-written beside it


def test_gives_up_after_retries(server, tmp_path):
    server.drops = 10
    with pytest.raises(download.DownloadError, match="after 2 attempts: .*pass --source with a local copy"):
        download.fetch(server.url, str(tmp_path / "c"), None, retries=1, progress=False)
    assert len(server.requests) == 2


def test_wrong_checksum_deletes_download_and_writes_nothing(server, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    with pytest.raises(ConversionError, match="Checksum mismatch") as e:
        convert(str(out), source=server.url, md5="f" * 32, cache_dir=str(cache), progress=False, log=lambda *_: None)
    assert "expected " + "f" * 32 in str(e.value)
    assert os.listdir(str(cache)) == []  # the download that did not verify is deleted
    assert not out.exists() or os.listdir(str(out)) == []


def test_not_found(server, tmp_path):
    with pytest.raises(download.DownloadError, match="404"):
        download.fetch(server.url.replace("cifar-10", "nope"), str(tmp_path), None, retries=0, progress=False)


def test_convert_from_url_end_to_end(server, tmp_path):
    m = convert(
        str(tmp_path / "out"),
        source=server.url,
        sha256=server.sha256,
        cache_dir=str(tmp_path / "cache"),
        progress=False,
        log=lambda *_: None,
    )
    assert [m["files"][n]["examples"] for n in ("train.tfrecords", "validation.tfrecords", "eval.tfrecords")] == [
        100,
        25,
        15,
    ]
    assert m["source"]["source"] == server.url
