"""Runpod's published OpenAPI file, when this checkout sits beside `shared/runpod/`.

Tests that need it skip with a reason when it is absent (a plain clone); CI has it.
"""

import functools
import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def openapi_path() -> Path:
    configured = os.environ.get("LABGOV_RUNPOD_OPENAPI")
    if configured:
        return Path(configured)
    return REPO_ROOT.parent / "shared/runpod/openapi-v2.json"


@functools.cache
def load_openapi() -> dict | None:
    path = openapi_path()
    if not path.is_file():
        return None
    return json.loads(path.read_text())


SKIP_REASON = (
    f"Runpod's OpenAPI file is absent ({openapi_path()}); set LABGOV_RUNPOD_OPENAPI to check "
    "our schema against it"
)
