from rest_framework.throttling import ScopedRateThrottle

from labgov.api.models import ApiToken


class TokenScopedRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle counted per token (each of a person's tokens has its own budget);
    session calls are counted per person."""

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"addr-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
