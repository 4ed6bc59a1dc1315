"""A real OCI registry for the push/pull tests: Debian's ``docker-registry`` (CNCF distribution 2.8), started
by the test on a free loopback port with its own config and storage in a temp dir, with or without htpasswd
auth (CI installs it: .ci/run). Also a tiny hostile registry (stdlib ``http.server``) for the bounds."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading

from tests.helpers.wait import wait_for

USER, PASSWORD = "builder", "s3cret-pw"


def binary() -> str | None:
    """docker-registry (Debian) or registry (upstream's name) on PATH, else None."""
    return shutil.which("docker-registry") or shutil.which("registry")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def htpasswd_line(user: str, password: str) -> str:
    """``user:<bcrypt>``, the only hash distribution's htpasswd accepts: apache2-utils' htpasswd, else libxcrypt."""
    tool = shutil.which("htpasswd")
    if tool:
        out = subprocess.run(
            [tool, "-Bbn", user, password], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    import crypt  # Python <= 3.12; CI installs apache2-utils for later ones

    return f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))}"


class Registry:
    """A distribution registry of this test: ``host`` (``127.0.0.1:PORT``), ``storage`` (its blobs on disk)."""

    def __init__(self, exe: str, workdir: str, auth: bool = False, tls: bool = False):
        os.makedirs(workdir, exist_ok=True)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.storage = os.path.join(workdir, "data")
        self.auth = auth
        cfg = [
            "version: 0.1",
            "log: {level: error, accesslog: {disabled: true}}",
            f"storage: {{filesystem: {{rootdirectory: {self.storage}}}, delete: {{enabled: true}}}}",
            f"http: {{addr: '{self.host}', secret: {os.urandom(8).hex()}"
            + (", tls: {{certificate: {}, key: {}}}".format(*self_signed(workdir)) if tls else "")
            + "}",
        ]
        self.ca = os.path.join(workdir, "cert.pem") if tls else None
        if auth:
            pw = os.path.join(workdir, "htpasswd")
            with open(pw, "w") as f:
                f.write(htpasswd_line(USER, PASSWORD) + "\n")
            cfg.append(f"auth: {{htpasswd: {{realm: jitwarden-test, path: {pw}}}}}")
        config = os.path.join(workdir, "config.yml")
        with open(config, "w") as f:
            f.write("\n".join(cfg) + "\n")
        self.log = open(os.path.join(workdir, "registry.log"), "wb")
        self.proc = subprocess.Popen(
            [exe, "serve", config], stdout=self.log, stderr=subprocess.STDOUT
        )
        try:
            wait_for(self._answers, 15, f"the registry to answer on {self.host}")
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        import http.client
        import ssl

        if self.proc.poll() is not None:
            raise RuntimeError(f"the registry exited: see {self.log.name}")
        try:
            if self.ca:
                ctx = ssl.create_default_context(cafile=self.ca)
                c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=1, context=ctx)
            else:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            c.request("GET", "/v2/")
            status = c.getresponse().status
            c.close()
            return status in (200, 401)
        except OSError:
            return False

    def blobs(self) -> list[str]:
        """Paths of every blob's data file in the storage dir."""
        root = os.path.join(self.storage, "docker", "registry", "v2", "blobs")
        return [os.path.join(d, f) for d, _s, fs in os.walk(root) for f in fs if f == "data"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def self_signed(workdir: str) -> tuple[str, str]:
    """(cert.pem, key.pem) in ``workdir``: a self-signed certificate for 127.0.0.1 (its own CA: SSL_CERT_FILE)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jitwarden test registry")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = os.path.join(workdir, "cert.pem"), os.path.join(workdir, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


def docker_config(home: str, host: str, user: str = USER, password: str = PASSWORD) -> str:
    """Write ``~/.docker/config.json`` as ``docker login`` does (``auths.<host>.auth``); its path."""
    import base64
    import json

    d = os.path.join(home, ".docker")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "config.json")
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    with open(path, "w") as f:
        json.dump({"auths": {host: {"auth": auth}}}, f)
    return path


# ---------------------------------------------------------------- a hostile registry


class Hostile:
    """A loopback HTTP server answering every request with ``behaviour(handler)``: a registry that lies,
    stalls, loops or floods. ``hits`` counts requests; stopped with ``stop()``."""

    def __init__(self, behaviour):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.hits = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                outer.hits += 1
                try:
                    behaviour(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_HEAD = do_PUT = do_POST = _any

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that hung up mid-attack is the point, not a failure of the test

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
