"""Which features beyond answering the owner allowed one agent's model requests (model_body.FEATURES):
$NANOCLAW_DATA_DIR/policy/<folder>/features.json `{"allow": ["web_search"]}`, outside anything a sandbox
mounts. The door reads it per request through a stamp check (a changed file governs the next request);
a file that does not read allows nothing. Written only by `model feature allow|deny`, audited."""
from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from ..models import audit
from .model_body import FEATURES
from .policy_files import group_file, stamp, write_json

log = logging.getLogger("nanoclaw.proxy.features")

FEATURES_FILE = "features.json"


def parse(raw: bytes) -> frozenset[str]:
    """The allowed features a file names (pure); unknown names are left out."""
    data = json.loads(raw.decode("utf-8"))
    allow = data.get("allow") if isinstance(data, dict) else None
    return frozenset(f for f in allow if f in FEATURES) if isinstance(allow, list) else frozenset()


class FeatureBook:
    def __init__(self, root: Path):
        self.root = Path(root)
        self._seen: dict[str, tuple] = {}
        self._lock = threading.Lock()

    def allowed(self, folder: str) -> frozenset[str]:
        path = group_file(self.root, folder, FEATURES_FILE)
        now = stamp(path)
        with self._lock:
            kept = self._seen.get(folder)
            if kept is not None and kept[0] == now:
                return kept[1]
        try:
            found = parse(path.read_bytes()) if now is not None else frozenset()
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            log.error("%s does not read (%s): no feature allowed for %s", path, exc, folder)
            found = frozenset()
        with self._lock:
            self._seen[folder] = (now, found)
        return found


def change(root: Path, folder: str, feature: str, allow: bool, actor: str, why: str | None = None) -> list[str]:
    """Allow or deny one feature for one agent; the features allowed after."""
    if feature not in FEATURES:
        raise ValueError(f"{feature!r} is not a feature; one of: {', '.join(FEATURES)}")
    path = group_file(root, folder, FEATURES_FILE)
    try:
        before = parse(path.read_bytes())
    except FileNotFoundError:
        before = frozenset()
    except (OSError, ValueError, UnicodeDecodeError):
        before = frozenset()  # a broken file allowed nothing; it is written anew
    after = sorted(before | {feature}) if allow else sorted(before - {feature})
    write_json(path, {"allow": after})
    audit(actor, "model.feature.allow" if allow else "model.feature.deny", folder, feature=feature,
          why=why or "")
    return after
