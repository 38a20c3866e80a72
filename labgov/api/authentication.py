"""How API calls say who they are: a personal token (`Authorization: Bearer lgv_…`), or the
browser session (DRF's SessionAuthentication, which enforces CSRF on writes)."""

from rest_framework import authentication, exceptions

from labgov.api.services import TokenRefused, token_check


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != self.keyword.lower() or not presented.strip():
            raise exceptions.AuthenticationFailed(
                "Send the token as 'Authorization: Bearer <token>'.", code="token_malformed"
            )
        try:
            token = token_check(presented.strip())
        except TokenRefused as exc:
            raise exceptions.AuthenticationFailed(exc.message, code=exc.code) from None
        return token.user, token

    def authenticate_header(self, request):
        # Makes a missing or refused token a 401 (with this challenge), never a 403.
        return f'{self.keyword} realm="api"'
