"""The docker runtime against a remote engine: `DOCKER_HOST=tcp://127.0.0.1:PORT` with TLS.

The test starts a second private dockerd of its own that listens only on a loopback TCP port
and demands client certificates, which the test generates with the openssl CLI. The run then
cannot lean on a shared file system: the image reaches that engine as a tar stream through the
API (its data root starts empty), and logs come back through the API. Afterwards the engine
must hold no container, network or volume of the run (the cached image stays, by design).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_wedge.topology.ports import port_is_free
from pytest_wedge.waiting import wait_for

SCENARIO = "stray-requester-masks-router-wedge"  # incident 1: `docker pause` on the router
# Below the xdist workers' port slices (20000-31999), so no topology ever wants it.
ENGINE_PORTS = range(19500, 20000)
DEFAULT_NETWORKS = {"host", "none", "bridge"}


@dataclass
class Engine:
    port: int
    certs: Path  # ca.pem, cert.pem, key.pem: what DOCKER_CERT_PATH names
    log: Path

    @property
    def host(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def ping(self, *, with_client_cert: bool = True) -> str:
        """GET /_ping over TLS with the test's CA (plain ssl: what is tested is the engine)."""
        context = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        if with_client_cert:
            context.load_cert_chain(str(self.certs / "cert.pem"), str(self.certs / "key.pem"))
        url = f"https://127.0.0.1:{self.port}/_ping"
        with urllib.request.urlopen(url, context=context, timeout=5) as reply:
            return str(reply.read().decode())


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(out: Path) -> Path:
    """A CA, a server certificate for IP 127.0.0.1, and a client certificate, as dockerd's
    `--tlsverify` and docker-py's `DOCKER_CERT_PATH` expect them."""
    out.mkdir(parents=True)
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=pytest-wedge test CA",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        cwd=out,
    )
    for name, subject, usage in (
        ("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
        ("client", "/CN=pytest-wedge client", "extendedKeyUsage=clientAuth"),
    ):
        (out / f"{name}.ext").write_text(usage + "\n")
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            f"{name}-key.pem",
            "-out",
            f"{name}.csr",
            cwd=out,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}-cert.pem",
            cwd=out,
        )
    shutil.copy(out / "client-cert.pem", out / "cert.pem")
    shutil.copy(out / "client-key.pem", out / "key.pem")
    return out


def stop_daemon(process: subprocess.Popen[bytes], root: Path) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    # dockerd leaves its default network namespace mounted under the exec root.
    netns = root / "exec" / "netns" / "default"
    if os.path.ismount(netns):
        subprocess.run(["umount", "-l", str(netns)], check=False, timeout=30)
    with open("/proc/self/mounts") as mounts:
        if f" {root}/" in mounts.read():
            return  # never delete a tree with a mount inside it; the next run reports it
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def remote_engine() -> Iterator[Engine]:
    if os.environ.get("WEDGE_DOCKER") == "0":
        pytest.skip("WEDGE_DOCKER=0: the Docker tests are off")
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0 or shutil.which("openssl") is None:
        pytest.skip("needs dockerd, openssl and root (`make test` installs and runs them)")
    # A short path: the engine's unix sockets (containerd) must fit in 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="wedge-remote-"))
    certs = make_certificates(root / "certs")
    port = next(p for p in ENGINE_PORTS if port_is_free(p))
    log = root / "dockerd.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                dockerd,
                "--host",
                f"tcp://127.0.0.1:{port}",
                "--tlsverify",
                "--tlscacert",
                str(certs / "ca.pem"),
                "--tlscert",
                str(certs / "server-cert.pem"),
                "--tlskey",
                str(certs / "server-key.pem"),
                "--data-root",
                str(root / "data"),
                "--exec-root",
                str(root / "exec"),
                "--pidfile",
                str(root / "dockerd.pid"),
                "--bridge",
                "none",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    engine = Engine(port, certs, log)
    try:
        wait_for(
            lambda: process.poll() is not None or _pings(engine),
            timeout_s=60,
            what="the TLS dockerd to answer /_ping",
            describe=lambda: log.read_text()[-2000:],
        )
        assert process.poll() is None, f"dockerd exited: {log.read_text()[-2000:]}"
        yield engine
    finally:
        stop_daemon(process, root)


def _pings(engine: Engine) -> bool:
    try:
        return engine.ping() == "OK"
    except OSError:  # not listening yet (URLError and ssl errors are OSErrors)
        return False


def test_the_engine_demands_a_client_certificate(remote_engine: Engine) -> None:
    assert remote_engine.ping() == "OK"
    with pytest.raises(OSError):
        remote_engine.ping(with_client_cert=False)


@pytest.mark.timeout(600)
def test_router_pause_scenario_on_a_remote_tls_engine(
    remote_engine: Engine,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", remote_engine.host)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(remote_engine.certs))
    # The image goes to the engine first, as a tar stream through the API; timed apart from
    # the scenario's own timeout (a fresh engine pays it once, then finds the tag).
    from pytest_wedge.runtime.dockerd import connect
    from pytest_wedge.runtime.images import ensure_image

    with contextlib.closing(connect()) as client:
        image = ensure_image(client)
    assert image.built
    print(f"image {image.tag}: {image.size_bytes / 1e6:.0f} MB sent in {image.seconds:.1f} s")
    artifacts = pytester.path / "artifacts"
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    result = pytester.runpytest_subprocess(
        f"--wedge-scenarios={SCENARIO}",
        "--wedge-runtime=docker",
        "--wedge-keep",
        f"--wedge-artifacts={artifacts}",
        f"--wedge-toxiproxy={toxiproxy}",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=1)

    # Artifacts came back: the diagnosis, and the containers' logs read through the API.
    (kept,) = list((artifacts / "latest" / "tests").iterdir())
    # (The scenario itself checked that the wedge was located at the router.)
    assert "location" in json.loads((kept / "diagnosis.json").read_text())
    # The test's own window of the router's log: what smg wrote while the scenario ran.
    router_log = (kept / "logs" / "router.log").read_text()
    assert router_log.strip(), "nothing of the router's own output came back"

    client = connect()  # through DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, as the run
    try:
        # The image was sent to this engine (its data root started empty) ...
        assert client.images.list(name="pytest-wedge-local")
        # ... and the run left nothing else behind.
        assert client.containers.list(all=True) == []
        assert {n.name for n in client.networks.list()} <= DEFAULT_NETWORKS
        assert client.volumes.list() == []
    finally:
        client.close()
