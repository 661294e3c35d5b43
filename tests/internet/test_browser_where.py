"""Where a session's browser runs, and which tools an agent is offered (issue 62, items 4 and 5). Pure."""
from __future__ import annotations

from nanoclaw.reading.access import BROWSER_TOOLS, Access, withheld
from nanoclaw.reading.browser_sandbox import BUILD_IT, Where, decide


def test_the_browser_runs_beside_the_agents_and_never_beside_a_remote_engine_or_a_cluster():
    assert decide("bwrap", None, False, None, None, True) == Where("bwrap")
    local = "unix:///run/nanoclaw-docker/docker.sock"
    assert decide("docker", local, True, "nanoclaw-browser:abc", None, True) == Where("docker", local, "nanoclaw-browser:abc")
    # agents on Docker without the browser's image: bubblewrap where it works, else what to build
    assert decide("auto", local, True, None, None, True) == Where("bwrap")
    assert decide("docker", local, True, None, "bwrap is not installed", True) == f"no browser image on the Docker engine: {BUILD_IT}"
    assert "another machine" in decide("docker", "tcp://10.0.0.5:2376", True, "nanoclaw-browser:abc", None, True)
    assert "Kubernetes" in decide("kubernetes", None, False, None, None, True)
    assert "bubblewrap cannot" in decide("bwrap", None, False, None, "bwrap is not installed", True)
    assert "Chromium is not installed" in decide("bwrap", None, False, None, None, False)
    assert Where("docker", local, "img").worker_args() == ("--sandbox", "docker", "--engine", local, "--image", "img")


def test_the_browser_tools_are_offered_only_when_the_agent_may_browse_and_a_browser_can_run():
    on = Access(read="on", search="off", browser="on")
    assert not set(BROWSER_TOOLS) & withheld(on, False, browser_runs=True)
    assert set(BROWSER_TOOLS) <= withheld(on, False, browser_runs=False)
    assert set(BROWSER_TOOLS) <= withheld(Access(read="on", browser="off"), False, browser_runs=True)
    assert "web_read" in withheld(Access(read="off", browser="on"), False)  # each switch on its own
