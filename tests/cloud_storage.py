"""Cloud Storage on loopback for both of the package's clients, in one process:

    python -m tests.cloud_storage DIR      # serves until killed; DIR/ca.pem, then DIR/ports.json

``google-cloud-storage`` (the package's own manifests, locks, ``results.json``) reaches gcp-storage-emulator
through ``STORAGE_EMULATOR_HOST``. TensorFlow's own ``gs://`` file system (the Estimator's checkpoints,
summaries and exports, the input pipeline's records, TensorBoard) has no endpoint setting: it calls
``https://www.googleapis.com`` (metadata, uploads) and ``https://storage.googleapis.com`` (reads) through
libcurl, which honours ``https_proxy`` and ``CURL_CA_BUNDLE``. So a proxy here answers CONNECT for those two
hosts only, ends TLS with a certificate of a CA made for the session (trustme), and passes each request, as
TensorFlow sent it, to the same emulator: one bucket that both clients see. ``environment`` gives the
variables a job needs (``GOOGLE_AUTH_TOKEN_FOR_TESTING`` is TensorFlow's own hook for a token that needs no
metadata server). The front keeps a ledger of TensorFlow's uploads, ``uploads`` reads it: what a job sends.
"""

import contextlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

from tests.helpers import REPO, free_port

HOSTS = ("www.googleapis.com", "storage.googleapis.com")
# Hop-by-hop headers, and the body's framing: the proxy reads the whole body and sends it with a length.
_NOT_FORWARDED = ("expect", "proxy-connection", "connection", "content-length", "transfer-encoding")


EMULATOR_TIMEOUT = 20.0  # seconds the front waits on the emulator for one request
UPLOADS = "uploads.jsonl"  # the front's ledger: {"object": "BUCKET/NAME", "bytes": N} a request that sends data


def serving_directory() -> str:
    """The DIRECTORY of the server this process's environment points at (``environment``: its CA is there)."""
    return os.path.dirname(os.environ["CURL_CA_BUNDLE"])


def uploads(directory: str, prefix: str = "") -> list:
    """[(object, bytes)] of each upload request TensorFlow's client made to the server of DIRECTORY, in order,
    for the objects whose "BUCKET/NAME" starts with ``prefix``. TensorFlow's client cannot append: it sends a
    file whole at each flush and at its close."""
    path = os.path.join(directory, UPLOADS)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        entries = [json.loads(line) for line in f]
    return [(e["object"], e["bytes"]) for e in entries if e["object"].startswith(prefix)]


def environment(directory: str) -> dict:
    """The variables that point both clients at the process serving DIRECTORY (``ports.json`` written)."""
    with open(os.path.join(directory, "ports.json")) as f:
        ports = json.load(f)
    return {
        "STORAGE_EMULATOR_HOST": "http://127.0.0.1:%d" % ports["emulator"],
        "https_proxy": "http://127.0.0.1:%d" % ports["proxy"],
        "HTTPS_PROXY": "http://127.0.0.1:%d" % ports["proxy"],
        "CURL_CA_BUNDLE": os.path.join(directory, "ca.pem"),
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
        "NO_GCE_CHECK": "true",
        # A request the emulator cannot serve fails the test in seconds, not after TensorFlow's ten retries; a
        # transient one (a 503 from the front) is retried, as on Cloud Storage.
        "GCS_RETRY_CONFIG_MAX_RETRIES": "3",
    }


@contextlib.contextmanager
def running(directory: str, timeout: float = 30.0):
    """Serves Cloud Storage from a process of its own (``python -m tests.cloud_storage DIRECTORY``, its output in
    DIRECTORY/server.log) until the block ends; yields ``environment(directory)``. RuntimeError when it does not
    start."""
    log = os.path.join(directory, "server.log")
    with open(log, "w") as out:  # a file, not a pipe nobody reads: the emulator's tracebacks
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cloud_storage", directory], cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.time() + timeout
        while not os.path.exists(os.path.join(directory, "ports.json")):
            if proc.poll() is not None:
                raise RuntimeError("tests.cloud_storage exited with %s: %s" % (proc.returncode, open(log).read()))
            if time.time() > deadline:
                raise RuntimeError("tests.cloud_storage wrote no ports.json in %.0f s" % timeout)
            time.sleep(0.1)
        yield environment(directory)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _accept_empty_uploads(server_module) -> None:
    """gcp-storage-emulator fails a media or resumable upload with no bytes (its body reads as None), which Cloud
    Storage accepts: TensorFlow writes one for every directory it makes (``a/b/``) and for empty files."""
    read = server_module._read_data

    def read_data(handler, query):
        data = read(handler, query)
        if data is None and query.get("uploadType", [None])[0] in ("media", "resumable"):
            return b""
        return data

    server_module._read_data = read_data


def _read_body(stream, headers: dict) -> bytes:
    """The request's body: chunked (TensorFlow's uploads send both ``Transfer-Encoding: chunked`` and a
    ``Content-Length``; the first decides, RFC 9112 6.3), else by its length."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(stream.readline().split(b";")[0], 16)
            chunk = stream.read(size)
            stream.readline()
            if not size:
                return body
            body += chunk
    return stream.read(int(headers.get("content-length", 0)))


class TlsFront:
    """The proxy: CONNECT to HOSTS, TLS with the session CA's certificate, each request to the emulator."""

    def __init__(self, emulator_port: int, ca_path: str, ledger: str):
        import trustme

        ca = trustme.CA()
        ca.cert_pem.write_to_path(ca_path)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*HOSTS).configure_cert(self.context)
        self.emulator_port = emulator_port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._ledger, self._ledger_lock = open(ledger, "a"), threading.Lock()

    def serve_forever(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._connect, args=(conn,), daemon=True).start()

    def _connect(self, conn) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            stream = conn.makefile("rb")
            method, target, _ = stream.readline().decode().split()
            while stream.readline() not in (b"\r\n", b"\n", b""):
                pass
            if method != "CONNECT" or target.rsplit(":", 1)[0] not in HOSTS:
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    stream = tls.makefile("rb")  # one reader a connection: a reader reads ahead
                    while self._relay(tls, stream):
                        pass
            except (OSError, ssl.SSLError):
                pass  # the client closed its connection

    def _record_upload(self, path: str, size: int) -> None:
        # /upload/storage/v1/b/BUCKET/o?uploadType=resumable&name=NAME&upload_id=...: the data of a session.
        url = urllib.parse.urlsplit(path)
        bucket = url.path.split("/b/", 1)[1].split("/", 1)[0]
        name = urllib.parse.parse_qs(url.query).get("name", ["?"])[0]
        with self._ledger_lock:
            self._ledger.write(json.dumps({"object": bucket + "/" + name, "bytes": size}) + "\n")
            self._ledger.flush()

    def _relay(self, tls, stream) -> bool:
        """Passes one request to the emulator and its answer back; False when the client has closed."""
        line = stream.readline()
        if not line.strip():
            return False
        method, path, _ = line.decode().split()
        headers = []
        while True:
            header = stream.readline().decode()
            if header in ("\r\n", "\n", ""):
                break
            name, value = header.split(":", 1)
            headers.append((name.strip(), value.strip()))
        lower = {name.lower(): value for name, value in headers}
        if lower.get("expect", "").lower() == "100-continue":
            tls.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = _read_body(stream, lower)
        if body and path.startswith("/upload/"):
            self._record_upload(path, len(body))
        upstream = http.client.HTTPConnection("127.0.0.1", self.emulator_port, timeout=EMULATOR_TIMEOUT)
        try:
            upstream.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() not in _NOT_FORWARDED:
                    upstream.putheader(name, value)  # Host too: the emulator names upload sessions after it
            upstream.putheader("Content-Length", str(len(body)))
            upstream.endheaders(body)
            response = upstream.getresponse()
            data = response.read()
        except OSError as e:
            # Cloud Storage answers a failure of its own with a 503, which clients retry; closing the connection
            # instead reads as "Empty reply from server". The cause goes to server.log.
            print("front: %s %s: %r" % (method, path, e), file=sys.stderr, flush=True)
            tls.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            return True
        finally:
            upstream.close()
        lines = ["HTTP/1.1 %d %s" % (response.status, response.reason)]
        for name, value in response.getheaders():
            if name.lower() in _NOT_FORWARDED:
                continue
            if name.lower() == "location":  # an upload session: at the host the client asked, by https (the emulator
                # names its own address, or the Host header, by http, as gcp-storage-emulator 2024.8.3 and 2026.7.19 do)
                value = urllib.parse.urlsplit(value)._replace(scheme="https", netloc=lower["host"]).geturl()
            lines.append("%s: %s" % (name, value))
        lines.append("Content-Length: %d" % len(data))
        tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
        return True


def serve(directory: str) -> None:
    """Runs the emulator and its TLS front until SIGTERM; writes DIRECTORY/ports.json once both listen."""
    from gcp_storage_emulator import server

    _accept_empty_uploads(server)
    # The emulator serves one connection at a time: one that stalls must not hold every other request.
    server.RequestHandler.timeout = EMULATOR_TIMEOUT / 2
    # Its answers go out as several unbuffered writes: with Nagle's algorithm, each answer's last write waited
    # for the front's delayed acknowledgement (40 ms, a quarter of a job's ~800 requests).
    server.RequestHandler.disable_nagle_algorithm = True
    emulator_port = free_port()
    emulator = server.create_server("127.0.0.1", emulator_port, in_memory=True)
    emulator.start()
    front = TlsFront(emulator_port, os.path.join(directory, "ca.pem"), os.path.join(directory, UPLOADS))
    threading.Thread(target=front.serve_forever, daemon=True).start()
    partial = os.path.join(directory, "ports.json.tmp")
    with open(partial, "w") as f:
        json.dump({"emulator": emulator_port, "proxy": front.port}, f)
    os.replace(partial, os.path.join(directory, "ports.json"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        signal.pause()
    finally:
        emulator.stop()


if __name__ == "__main__":
    serve(sys.argv[1])
