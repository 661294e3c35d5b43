"""The Docker image agents run in."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..runtime.image import BROWSER_PACKAGES, BROWSER_REPO, ImageBuildError, build_group_image, build_image
from .base import Mistake, group, settings


@group("image")
def image_group():
    """The Docker image agents run in."""


@image_group.command("build")
@click.option("--ca-bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Extra CA certificates (PEM) to trust during the build, e.g. behind a TLS-inspecting proxy.")
@click.option("--browser", is_flag=True, help="Also build the browser's image (the agent image plus Debian's "
                                              "Chromium), for agents allowed a browser on Docker.")
def image_build(ca_bundle, browser):
    """Build the agent image from container/Dockerfile (a local Debian base is made with debootstrap
    when no registry is reachable); with --browser, the browser's image on top of it."""
    try:
        timings = build_image(settings(), ca_bundle=ca_bundle, progress=lambda line: click.echo(line))
        if browser:
            click.echo("built " + build_group_image(settings(), "", BROWSER_PACKAGES, [], ca_bundle=ca_bundle,
                                                    progress=lambda line: click.echo(line), repo=BROWSER_REPO))
    except ImageBuildError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # no engine: say how to get one
        raise Mistake(f"cannot build the image: {str(exc).splitlines()[0]} "
                      "(is a Docker engine running? scripts/docker-engine.sh start)") from None
    click.echo("built " + settings().agent_image + " (" +
               ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()) + ")")
