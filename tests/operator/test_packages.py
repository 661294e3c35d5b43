"""The host's installs into an agent's package prefix (operator/packages.py), with the real pip and
npm against a local wheel folder and a fake npm registry: what lands there works from PYTHONPATH and
NODE_PATH, no package code runs on the host, and a failed install keeps the previous set."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import require
from nanoclaw.operator import packages
from tests.fakes.npm_registry import FakeNpmRegistry
from tests.operator.test_operator_e2e import probe_wheel


REGISTRIES: dict = {}  # the fake registry of the running test, by its URL


@pytest.fixture
def indexes(tmp_path, monkeypatch):
    require(shutil.which("npm") is not None, "npm is not installed (apt-get install npm)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    probe_wheel(wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("NPM_CONFIG_CACHE", str(tmp_path / "npm-cache"))
    with FakeNpmRegistry() as npm:
        REGISTRIES[npm.url] = npm
        monkeypatch.setenv("NPM_CONFIG_REGISTRY", npm.url + "/")
        npm.publish({"name": "greeter", "version": "1.0.0", "main": "index.js", "bin": {"greet": "cli.js"},
                     "scripts": {"postinstall": f"touch {tmp_path / 'script-ran'}"}},
                    {"index.js": 'module.exports = () => "greeter says hi";\n',
                     "cli.js": '#!/usr/bin/env node\nconsole.log(require("./index.js")());\n'})
        yield tmp_path


def test_pip_and_npm_packages_land_in_the_prefix_and_work_from_there(indexes):
    prefix = indexes / "packages" / "andy"
    packages.install(prefix, ["nanoclaw-probe"], ["greeter"])
    env = {**os.environ, "PYTHONPATH": str(prefix / "python"), "NODE_PATH": str(prefix / "npm" / "node_modules")}
    said = subprocess.run([sys.executable, "-c", "import nanoclaw_probe; print(nanoclaw_probe.hello())"], env=env,
                          capture_output=True, text=True).stdout
    assert said.strip() == "probe says hello"
    said = subprocess.run(["node", "-e", 'console.log(require("greeter")())'], env=env, capture_output=True,
                          text=True).stdout
    assert said.strip() == "greeter says hi"
    assert subprocess.run([str(prefix / "npm" / "node_modules" / ".bin" / "greet")], capture_output=True,
                          text=True).stdout.strip() == "greeter says hi"
    assert not (indexes / "script-ran").exists()  # npm ran no package script on the host


def test_a_failed_install_keeps_the_previous_set_and_says_why(indexes):
    prefix = indexes / "packages" / "andy"
    packages.install(prefix, ["nanoclaw-probe"], [])
    with pytest.raises(packages.InstallError) as failed:
        packages.install(prefix, ["nanoclaw-probe", "no-such-project"], [])
    assert "no-such-project" in str(failed.value) or "No matching distribution" in str(failed.value)
    assert (prefix / "python" / "nanoclaw_probe" / "__init__.py").exists()
    assert not any(p.name.startswith(".andy.") for p in prefix.parent.iterdir())  # no staging left behind


# --- nothing local, nothing built (issue 29, hole 6) --------------------------------------------

def _sdist(path, marker):
    """An sdist whose in-tree build backend leaves `marker` when pip as much as imports it (code
    running on the host); it needs nothing from an index to run."""
    import io
    import tarfile
    files = {"evil-1.0/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                        'backend-path = ["."]\n',
             "evil-1.0/backend.py": f"open({str(marker)!r}, 'w').close()\n",
             "evil-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n"}
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data.encode())
            tar.addfile(info, io.BytesIO(data.encode()))


def test_a_package_name_never_names_a_local_file_and_pip_builds_nothing(indexes, monkeypatch):
    from nanoclaw.proposal_rules import RuleError, check_packages
    for pip, npm in ((["evil.tar.gz"], []), (["evil.whl"], []), ([], ["evil.tgz"]), (["Evil.ZIP"], [])):
        with pytest.raises(RuleError, match="never a file"):
            check_packages([], npm, pip)
    workdir = indexes / "service"
    workdir.mkdir()
    _sdist(workdir / "evil.tar.gz", indexes / "setup-py-ran")
    monkeypatch.chdir(workdir)  # the service's working folder holds a file of that name
    with pytest.raises(packages.InstallError):
        packages.install(indexes / "packages" / "andy", ["evil.tar.gz"], [])
    assert not (indexes / "setup-py-ran").exists()


@pytest.mark.parametrize("spec", ["file:../../../../../../etc", "link:../../../../../../etc",
                                  "git+https://127.0.0.1:9/evil.git"])
def test_npm_refuses_a_registry_package_with_a_local_or_git_dependency(indexes, spec):
    REGISTRIES[os.environ["NPM_CONFIG_REGISTRY"].rstrip("/")].publish({"name": "innocent", "version": "1.0.0", "main": "index.js",
                                  "dependencies": {"evil": spec}}, {"index.js": "module.exports = 1;\n"})
    prefix = indexes / "packages" / "andy"
    with pytest.raises(packages.InstallError) as refused:
        packages.install(prefix, [], ["innocent"])
    assert "registry" in str(refused.value) or "evil" in str(refused.value)
    assert not prefix.exists() and not any(p.name.startswith(".andy.") for p in prefix.parent.iterdir())


def test_not_from_registry_reads_a_lockfile():
    reg = "https://registry.example/"
    ok = {"packages": {"": {}, "node_modules/a": {"resolved": reg + "a/-/a-1.tgz", "integrity": "sha512-x"},
                       "node_modules/a/node_modules/b": {"inBundle": True},
                       "node_modules/c": {"version": "1.2.3-beta.1", "integrity": "sha512-y"}}}
    assert packages.not_from_registry(ok, reg) is None
    for entry in ({"link": True, "resolved": "../x"}, {"resolved": "file:../x.tgz", "integrity": "sha512-x"},
                  {"resolved": "git+ssh://git@github.com/x/y.git#abc"}, {"resolved": "https://evil.example/a.tgz",
                                                                          "integrity": "sha512-x"},
                  {"version": "file:../x", "integrity": "sha512-x"}, {"version": "1.0.0"}):
        assert packages.not_from_registry({"packages": {"node_modules/a": entry}}, reg), entry
