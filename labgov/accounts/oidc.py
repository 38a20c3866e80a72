"""Institutional sign-in through OpenID Connect (mozilla-django-oidc, code flow with PKCE).

What this module adds to the library, and why:
- A person is found by the provider's (issuer, subject) in ExternalIdentity, never by email.
  A changed email at the provider updates the person's email; it never signs them in as
  whoever else has (or had) that address, and a local account is never taken over by email.
- The ID token must be signed by the provider's key, for this client (aud, azp), from the
  configured issuer, unexpired, and carry the nonce of this sign-in; userinfo must describe
  the same subject. Anything else is refused, logged as a warning, and the person sees
  "Sign-in through ... failed" on the login page.
- An optional group claim maps to lab membership (LABGOV_OIDC_GROUP_LABS): a group gives a
  member role in its lab; losing the group ends that role and only that role. Both audited.
- With sign-in switched off (no LABGOV_OIDC_CLIENT_ID) the backend answers nothing and the
  /oidc/ pages are 404.
"""

import logging

import jwt
import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.db.models import Q
from django.http import Http404
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from labgov.accounts.access import forget_scope
from labgov.accounts.backends import active_user
from labgov.accounts.models import ExternalIdentity, Institution, Lab, Membership, Role, User
from labgov.accounts.usernames import ascii_username, free_username
from labgov.audit.services import audit_record

log = logging.getLogger(__name__)

# Clock skew allowed between labgov and the identity provider when checking exp and iat.
LEEWAY_SECONDS = 60


class InstitutionOIDCBackend(OIDCAuthenticationBackend):
    def __init__(self, *args, **kwargs):
        self.enabled = settings.LABGOV_OIDC_ENABLED
        if self.enabled:
            super().__init__(*args, **kwargs)

    def authenticate(self, request, **kwargs):
        if not self.enabled:
            return None
        return super().authenticate(request, **kwargs)

    def get_user(self, user_id):
        return active_user(user_id)

    def retrieve_matching_jwk(self, token):
        """The provider's key that signed `token`: the one its `kid` names, or, for a token
        naming none, the only key the provider publishes for the algorithm. Anything else
        (no such key, several candidates, a malformed key set) is refused in words, never a
        500 (the library's own lookup failed with a KeyError on a token without `kid`)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"The ID token is not a JWT: {exc}") from None
        response = requests.get(
            self.OIDC_OP_JWKS_ENDPOINT,
            verify=self.get_settings("OIDC_VERIFY_SSL", True),
            timeout=self.get_settings("OIDC_TIMEOUT", None),
            proxies=self.get_settings("OIDC_PROXY", None),
        )
        response.raise_for_status()
        try:
            keys = response.json().get("keys")
        except (ValueError, AttributeError):
            keys = None
        if not isinstance(keys, list):
            raise SuspiciousOperation("The identity provider's key set (JWKS) is malformed.")
        alg, kid = header.get("alg"), header.get("kid")
        candidates = [
            jwk
            for jwk in keys
            if isinstance(jwk, dict)
            and jwk.get("alg", alg) == alg
            and jwk.get("use", "sig") == "sig"
        ]
        if kid is not None:
            candidates = [jwk for jwk in candidates if jwk.get("kid") == kid]
        if len(candidates) != 1:
            raise SuspiciousOperation(
                f"No single signing key of the identity provider matches the ID token "
                f"(kid {kid!r}, {len(candidates)} candidates)."
            )
        try:
            return jwt.PyJWK(candidates[0])
        except jwt.PyJWKError as exc:
            raise SuspiciousOperation(f"The identity provider's key is unusable: {exc}") from None

    def _verify_jws(self, payload, key):
        """Verify signature and the claims that make the token ours: issuer, audience,
        authorized party, expiry and issue time (all required)."""
        try:
            header = jwt.get_unverified_header(payload)
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"The ID token is not a JWT: {exc}") from None
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(
                f"The ID token is signed with {header.get('alg')!r}, "
                f"not {self.OIDC_RP_SIGN_ALGO!r}."
            )
        try:
            claims = jwt.decode(
                payload,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=settings.LABGOV_OIDC_ISSUER,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"The ID token was refused: {exc}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("The ID token was issued to another client (azp).")
        return claims

    def get_or_create_user(self, access_token, id_token, payload):
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload["sub"]:
            raise SuspiciousOperation("Userinfo describes another subject than the ID token.")
        claims = {**userinfo, "sub": payload["sub"], "iss": payload["iss"]}
        return sign_in_identity(claims)


@transaction.atomic
def sign_in_identity(claims: dict) -> User | None:
    """The person for a verified set of claims: found by (iss, sub), created at first sign-in,
    their name and email refreshed, and their provider-group memberships brought up to date."""
    issuer, subject = str(claims["iss"])[:300], str(claims["sub"])[:255]
    if not subject:
        raise SuspiciousOperation("The ID token has an empty subject.")
    identity = (
        ExternalIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if identity is None:
        user = User.objects.create(
            home_institution=_institution(),
            username=_free_username(claims),
            email=_clean(claims.get("email"), 254),
            first_name=_clean(claims.get("given_name"), 150),
            last_name=_clean(claims.get("family_name"), 150),
        )
        user.set_unusable_password()
        user.save(update_fields=["password"])
        identity = ExternalIdentity.objects.create(user=user, issuer=issuer, subject=subject)
        audit_record(
            actor=None,
            action="person.create_from_sign_in",
            target=user,
            institution_id=_institution_id(),
            after={"username": user.username, "email": user.email, "issuer": issuer},
            note="first sign-in through the identity provider",
        )
    user = identity.user
    if not user.is_active:
        log.warning("sign-in refused: %s is deactivated in labgov", user.username)
        return None
    changed = []
    for field, claim, limit in (
        ("email", "email", 254),
        ("first_name", "given_name", 150),
        ("last_name", "family_name", 150),
    ):
        value = _clean(claims.get(claim), limit)
        if claim in claims and getattr(user, field) != value:
            setattr(user, field, value)
            changed.append(field)
    if changed:
        user.save(update_fields=changed)
    identity.last_sign_in_at = timezone.now()
    identity.save(update_fields=["last_sign_in_at"])
    _sync_group_memberships(identity, claims)
    return user


def _clean(value, limit: int) -> str:
    return value.strip()[:limit] if isinstance(value, str) else ""


def _free_username(claims: dict) -> str:
    """An ASCII username nobody's looks like (labgov/accounts/usernames.py)."""
    wanted = claims.get("preferred_username") or str(claims.get("email") or "").split("@")[0]
    return free_username(ascii_username(str(wanted)))


def _institution() -> Institution | None:
    slug = settings.LABGOV_OIDC_INSTITUTION
    return Institution.objects.filter(slug=slug).first() if slug else None


def _institution_id() -> int | None:
    institution = _institution()
    return institution.pk if institution else None


def _sync_group_memberships(identity: ExternalIdentity, claims: dict) -> None:
    mapping = settings.LABGOV_OIDC_GROUP_LABS
    if not mapping or not settings.LABGOV_OIDC_GROUPS_CLAIM:
        return
    institution = _institution()
    if institution is None:
        log.warning(
            "LABGOV_OIDC_INSTITUTION %r names no institution", settings.LABGOV_OIDC_INSTITUTION
        )
        return
    groups = claims.get(settings.LABGOV_OIDC_GROUPS_CLAIM) or []
    if isinstance(groups, str):
        groups = [groups]
    wanted_slugs = {mapping[g] for g in groups if isinstance(g, str) and g in mapping}
    labs = {lab.slug: lab for lab in Lab.objects.filter(institution=institution)}
    wanted = {labs[slug].pk for slug in wanted_slugs if slug in labs}
    user, today = identity.user, timezone.now().date()
    touched = False
    # end_date is the last day of access (as for membership_end): ending today is the soonest.
    lasting = Q(end_date__isnull=True) | Q(end_date__gt=today)
    for membership in identity.granted_memberships.filter(lasting, role=Role.MEMBER):
        if membership.lab_id not in wanted:
            membership.end_date = max(today, membership.start_date)
            membership.save(update_fields=["end_date"])
            audit_record(
                actor=None,
                action="membership.end",
                target=membership,
                institution_id=institution.pk,
                note="the identity provider no longer lists the group",
            )
            touched = True
    held = set(
        Membership.objects.active()
        .filter(lasting, user=user, role=Role.MEMBER, lab_id__in=wanted)
        .values_list("lab_id", flat=True)
    )
    for lab_id in sorted(wanted - held):
        membership = Membership.objects.create(
            user=user, institution=institution, lab_id=lab_id, role=Role.MEMBER
        )
        identity.granted_memberships.add(membership)
        audit_record(
            actor=None,
            action="membership.grant",
            target=membership,
            institution_id=institution.pk,
            note="group at the identity provider",
        )
        touched = True
    if touched:
        forget_scope(user)


class SignInView(OIDCAuthenticationRequestView):
    def get(self, request):
        if not settings.LABGOV_OIDC_ENABLED:
            raise Http404("Institutional sign-in is not set up.")
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    def get(self, request):
        if not settings.LABGOV_OIDC_ENABLED:
            raise Http404("Institutional sign-in is not set up.")
        try:
            return super().get(request)
        except SuspiciousOperation as exc:
            log.warning("sign-in refused: %s", exc)
        except requests.RequestException as exc:
            log.warning("sign-in failed talking to the identity provider: %s", exc)
        return self.login_failure()
