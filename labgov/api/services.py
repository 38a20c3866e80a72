"""Creating, checking and revoking personal API tokens."""

import datetime as dt
import hashlib
import hmac
import secrets

from django.db import transaction
from django.utils import timezone

from labgov.accounts import access
from labgov.api.models import ApiToken
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError

PREFIX = "lgv"
MAX_DAYS = 366
MAX_LIVE_TOKENS = 20
# last_used_at is written at most this often per token, so reads stay reads.
LAST_USED_GRANULARITY = dt.timedelta(minutes=1)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def token_create(*, actor, name: str, scope: str, days: int) -> tuple[ApiToken, str]:
    """A new token for the actor; returns it with its plain text, which is never stored."""
    access.require_person(actor, "Making an API token")
    name = (name or "").strip()
    if not name:
        raise DomainError("Give the token a name (what uses it).", field="name")
    if scope not in ApiToken.Scope.values:
        raise DomainError("Choose read or read and write.", field="scope")
    if not 1 <= days <= MAX_DAYS:
        raise DomainError(f"A token lives 1 to {MAX_DAYS} days.", field="days")
    now = timezone.now()
    live = ApiToken.objects.filter(user=actor, revoked_at__isnull=True, expires_at__gt=now)
    if live.count() >= MAX_LIVE_TOKENS:
        raise DomainError(f"You have {MAX_LIVE_TOKENS} live tokens: revoke one first.")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=actor,
        name=name[:100],
        key_id=key_id,
        secret_sha256=_digest(secret),
        scope=scope,
        created_at=now,
        expires_at=now + dt.timedelta(days=days),
    )
    audit_record(
        actor=actor,
        action="api_token.create",
        target=token,
        institution_id=None,
        after={"key_id": key_id, "scope": scope, "expires_at": token.expires_at.isoformat()},
    )
    return token, f"{PREFIX}_{key_id}_{secret}"


@transaction.atomic
def token_revoke(*, actor, token: ApiToken) -> ApiToken:
    access.require_person(actor, "Revoking an API token")
    locked = ApiToken.objects.select_for_update().get(pk=token.pk)
    if locked.user_id != actor.pk:
        raise DomainError("Only the token's owner can revoke it.")
    if locked.revoked_at is not None:
        return locked
    locked.revoked_at = timezone.now()
    locked.save(update_fields=["revoked_at"])
    audit_record(
        actor=actor,
        action="api_token.revoke",
        target=locked,
        institution_id=None,
        before={"revoked_at": None},
        after={"key_id": locked.key_id, "revoked_at": locked.revoked_at.isoformat()},
    )
    return locked


class TokenRefused(Exception):
    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.message = message
        self.code = code


def token_check(presented: str) -> ApiToken:
    """The live token the text names; TokenRefused says why not. Whether a token expired or
    was revoked is said only to whoever holds its secret."""
    parts = presented.split("_", 2)
    token = None
    if len(parts) == 3 and parts[0] == PREFIX and parts[1] and parts[2]:
        token = ApiToken.objects.select_related("user").filter(key_id=parts[1][:16]).first()
    if token is None or not hmac.compare_digest(token.secret_sha256, _digest(parts[2])):
        raise TokenRefused("The token is not valid.", "token_invalid")
    now = timezone.now()
    if token.revoked_at is not None:
        raise TokenRefused(
            f"The token was revoked at {token.revoked_at:%Y-%m-%d %H:%M} UTC.", "token_revoked"
        )
    if token.expires_at <= now:
        raise TokenRefused(
            f"The token expired at {token.expires_at:%Y-%m-%d %H:%M} UTC.", "token_expired"
        )
    if not token.user.is_active:
        raise TokenRefused("The token's owner can no longer sign in.", "user_inactive")
    if token.last_used_at is None or token.last_used_at < now - LAST_USED_GRANULARITY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
