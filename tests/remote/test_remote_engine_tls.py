"""A Docker engine behind TLS with its own CA (DOCKER_HOST=tcp://…, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH)
is reached even where REQUESTS_CA_BUNDLE names another bundle, as on machines behind an intercepting
proxy: requests lets that variable override the CA the Docker SDK pins, and the handshake then fails
with "unable to get local issuer certificate". The engine is the suite's second engine
(scripts/remote-engine.sh: its own network namespace, `dockerd --tlsverify` with a CA of its own),
so what answers is a real dockerd's TLS, not a stand-in."""
from __future__ import annotations

import shutil
import ssl

from nanoclaw.runtime import docker as docker_rt

SYSTEM_BUNDLE = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"


def use(monkeypatch, engine_env, cert_path) -> None:
    monkeypatch.setenv("DOCKER_HOST", engine_env["DOCKER_HOST"])
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(cert_path))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", SYSTEM_BUNDLE)
    monkeypatch.setenv("CURL_CA_BUNDLE", SYSTEM_BUNDLE)


def test_a_tls_engine_with_its_own_ca_is_reached_despite_requests_ca_bundle(engine_env, monkeypatch):
    use(monkeypatch, engine_env, engine_env["DOCKER_CERT_PATH"])
    client, where = docker_rt.connect()
    assert client is not None, f"no engine at {where}"
    assert where == engine_env["DOCKER_HOST"]
    assert "nanoclaw-agent:latest" in {tag for image in client.images.list() for tag in image.tags}
    client.close()


def test_without_the_client_certificate_the_engine_is_not_reached(engine_env, monkeypatch, tmp_path):
    bare = tmp_path / "only-ca"
    bare.mkdir()
    shutil.copy(f"{engine_env['DOCKER_CERT_PATH']}/ca.pem", bare / "ca.pem")
    use(monkeypatch, engine_env, bare)
    client, _where = docker_rt.connect()
    assert client is None


def test_an_engine_whose_certificate_another_ca_signed_is_not_trusted(engine_env, monkeypatch, tmp_path):
    # the client's own certificate, but the system's CAs instead of the engine's: the engine is a stranger
    other = tmp_path / "other-ca"
    other.mkdir()
    for name in ("cert.pem", "key.pem"):
        shutil.copy(f"{engine_env['DOCKER_CERT_PATH']}/{name}", other / name)
    shutil.copy(SYSTEM_BUNDLE, other / "ca.pem")
    use(monkeypatch, engine_env, other)
    client, _where = docker_rt.connect()
    assert client is None
