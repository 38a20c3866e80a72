"""Personal API tokens. The secret is shown once, at creation; only its SHA-256 is stored.

A token is `lgv_<key id>_<secret>`: the key id (public, indexed) finds the row, the secret
(256 random bits) is checked against the stored digest in constant time. A fast digest is
enough for a random secret of this length (nothing to guess from a dictionary), and it keeps
every API call to one indexed read.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class ApiToken(models.Model):
    class Scope(models.TextChoices):
        READ = "read", "Read"
        WRITE = "write", "Read and write"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    key_id = models.CharField(max_length=16, unique=True)
    secret_sha256 = models.CharField(max_length=64)
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.READ)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("created_at")),
                name="api_token_expires_after_creation",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_id})"

    @property
    def can_write(self) -> bool:
        return self.scope == self.Scope.WRITE

    def is_live(self, now=None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and self.expires_at > now
