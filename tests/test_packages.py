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
from tests.test_operator_e2e import probe_wheel


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
