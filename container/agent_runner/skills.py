"""The skills this sandbox may offer the model: only those the host mounted at /workspace/skills for this
start (the owner approved them and the host checked their bytes), loaded by the CLI as the plugin
`nanoclaw`, so the model sees `nanoclaw:<name>`. A SKILL.md the agent writes under its folder or home
is discovered by the CLI but not listed, and not callable (docs/decisions/2026-12-07-skills.md)."""
from __future__ import annotations

import os
import re
from pathlib import Path

SKILLS_DIR = Path("/workspace/skills")
PLUGIN = "nanoclaw"
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def approved_skills(root: Path = SKILLS_DIR) -> dict:
    """ClaudeAgentOptions' plugins and skills: the mounted plugin and its skills' qualified names, or no
    plugin and an empty list (which the SDK reads as "no skill", where None would mean every one)."""
    names = []
    if (root / ".claude-plugin" / "plugin.json").is_file():
        try:
            names = sorted(e.name for e in os.scandir(root / "skills") if e.is_dir(follow_symlinks=False)
                           and _NAME.match(e.name))
        except OSError:
            names = []
    if not names:
        return {"plugins": [], "skills": []}
    return {"plugins": [{"type": "local", "path": str(root)}], "skills": [f"{PLUGIN}:{n}" for n in names]}
