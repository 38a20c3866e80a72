from rest_framework.permissions import SAFE_METHODS, BasePermission

from labgov.api.models import ApiToken


class TokenScopeAllows(BasePermission):
    """A read token reads; writing needs a read + write token (or the signed-in session)."""

    message = "This token may only read: create a read + write token to act."

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS or not isinstance(request.auth, ApiToken):
            return True
        return request.auth.can_write
