"""Secrets kept out of the pod and endpoint environments labgov stores.

Environment variables are kept for attribution rules (`LABGOV_ALLOCATION`, a project name),
but people put credentials in them. A value is withheld when its variable's name says it is a
secret (`HF_TOKEN`, `JUPYTER_PASSWORD`), and also when the value itself carries one whatever
the name: the password of a URL (`DATABASE_URL=postgres://app:pw@db/x` keeps everything but
the password), a `password=`/`token=` pair, a bearer token, a private key, an AWS access key,
a token with a well-known prefix (`sk-…`, `hf_…`, `ghp_…`, `xoxb-…`, `rpa_…`) or a long random
looking string. Better to lose a harmless value than to store a key.

Applied where the client parses Runpod's answers (`parsing.py`), so no secret reaches the rest
of labgov, and again where the inventory stores them.
"""

import math
import re
from collections import Counter

REDACTED = "[redacted]"

# Variable names that mean the value is a secret.
SECRET_MARKERS = ("PASS", "SECRET", "TOKEN", "KEY", "CREDENTIAL", "AUTH", "COOKIE")

# scheme://user:password@host: the password goes, the rest stays useful.
_URL_PASSWORD = re.compile(r"(?i)([a-z][a-z0-9+.\-]*://[^/\s:@]*:)([^\s@/]+)(@)")

_SECRET_VALUE = re.compile(
    r"""(?ix)
    -----BEGIN[ A-Z]*PRIVATE\ KEY-----           # PEM private keys
    | \bbearer\s+\S+                             # Authorization: Bearer …
    | \b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)["']?\s*[=:]\s*\S+
    | \b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b   # AWS access key ids
    | \b(?:sk|pk|rk)[-_](?:live[-_]|test[-_]|proj[-_]|ant[-_])?[a-z0-9_\-]{16,}  # OpenAI, Stripe, …
    | \b(?:hf|ghp|gho|ghu|ghs|ghr|glpat|rpa|npm|pypi)[-_][a-z0-9_\-]{16,}
    | \bgithub_pat_[a-z0-9_]{20,}
    | \bxox[abprs]-[a-z0-9\-]{10,}               # Slack
    | \beyJ[a-z0-9_\-]{10,}\.[a-z0-9_\-]{10,}\.[a-z0-9_\-]*   # JWT
    """
)

# Long runs of letters and digits that look random: API keys without a known prefix.
_LONG_RUN = re.compile(r"[A-Za-z0-9]{32,}")
_UUID_HEX = re.compile(r"[0-9a-fA-F]{32}")


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _looks_random(run: str) -> bool:
    """A random key of 32+ letters and digits mixes both and repeats few characters; a hex
    digest (a commit, an image digest, a UUID without dashes) does not count: it uses 16
    symbols, so it stays at or under 4 bits per character."""
    if _UUID_HEX.fullmatch(run) or run.isalpha() or run.isdigit():
        return False
    return _entropy(run) > 4.0


def redact_value(value: str) -> str:
    """The value with any credential in it withheld."""
    value = _URL_PASSWORD.sub(lambda m: f"{m[1]}{REDACTED}{m[3]}", value)
    if _SECRET_VALUE.search(value) or any(_looks_random(r) for r in _LONG_RUN.findall(value)):
        return REDACTED
    return value


def redacted_env(env: dict[str, str]) -> dict[str, str]:
    return {
        name: REDACTED
        if any(m in name.upper() for m in SECRET_MARKERS)
        else redact_value(str(value))
        for name, value in env.items()
    }


def stored_env_redact(batch_size: int = 500) -> int:
    """Redact the environments stored before these rules existed (the sync rewrites those of
    resources it still lists; gone ones would keep theirs). Not audited: it changes no
    governance state, only withholds secrets. Returns how many resources changed."""
    from django.db import transaction

    from labgov.runpod.models import Resource

    changed = 0
    rows = Resource.objects.exclude(env={}).only("pk", "env").order_by("pk")
    last_pk = 0
    while True:
        batch = list(rows.filter(pk__gt=last_pk)[:batch_size])
        if not batch:
            return changed
        last_pk = batch[-1].pk
        dirty = []
        for resource in batch:
            clean = redacted_env(resource.env or {})
            if clean != resource.env:
                resource.env = clean
                dirty.append(resource)
        with transaction.atomic():
            Resource.objects.bulk_update(dirty, ["env"])
        changed += len(dirty)
