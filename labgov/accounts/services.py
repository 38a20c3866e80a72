import datetime as dt
from decimal import Decimal

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django.utils.text import slugify

from labgov.accounts.access import forget_scope
from labgov.accounts.models import INSTITUTION_ROLES, Institution, Lab, Membership, Role, User
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.snapshots import snapshot

# One message whether the account does not exist, is inactive or belongs to another
# institution, so the form cannot be used to learn who has an account where.
UNKNOWN_PERSON = "No one with that username can be added here."


@transaction.atomic
def institution_create(*, actor, name: str, slug: str = "") -> Institution:
    name = name.strip()
    if not name:
        raise DomainError("An institution needs a name.", field="name")
    slug = slug or slugify(name)[:60]
    if Institution.objects.filter(slug=slug).exists():
        raise DomainError(f"An institution called {slug!r} exists already.", field="name")
    institution = Institution.objects.create(name=name, slug=slug)
    audit_record(
        actor=actor,
        action="institution.create",
        target=institution,
        institution_id=institution.pk,
    )
    return institution


@transaction.atomic
def lab_create(
    *,
    actor,
    institution: Institution,
    name: str,
    kind: str = Lab.Kind.RESEARCH_GROUP,
    department: str = "",
    slug: str = "",
) -> Lab:
    name = name.strip()
    if not name:
        raise DomainError("A lab needs a name.", field="name")
    if kind not in Lab.Kind.values:
        raise DomainError(f"Unknown lab kind {kind!r}.", field="kind")
    slug = slug or slugify(name)[:60]
    if (
        Lab.objects.filter(institution=institution, slug=slug).exists()
        or Lab.objects.filter(institution=institution, name=name).exists()
    ):
        raise DomainError(f"{institution} already has a lab called {name}.", field="name")
    lab = Lab.objects.create(
        institution=institution, name=name, slug=slug, kind=kind, department=department.strip()
    )
    audit_record(actor=actor, action="lab.create", target=lab, institution_id=institution.pk)
    return lab


def _require_may_grant(actor, *, role: str, institution: Institution, lab: Lab | None) -> None:
    """Institution roles and lab admins: the institution's admins. Members: also the lab's
    admins."""
    from labgov.accounts.access import scope_for

    scope = scope_for(actor)
    if institution.pk in scope.admin_institutions:
        return
    if lab is not None and role == Role.MEMBER and lab.pk in scope.admin_labs:
        return
    raise DomainError("You cannot give this role here.", field="role")


@transaction.atomic
def membership_grant(
    *,
    actor,
    user: User,
    role: str,
    institution: Institution | None = None,
    lab: Lab | None = None,
    start_date: dt.date | None = None,
    end_date: dt.date | None = None,
) -> Membership:
    if role not in Role.values:
        raise DomainError(f"Unknown role {role!r}.", field="role")
    if role in INSTITUTION_ROLES:
        if institution is None or lab is not None:
            raise DomainError("Institution roles are given for an institution, not a lab.")
    else:
        if lab is None:
            raise DomainError("Lab roles are given for a lab.", field="lab")
        institution = lab.institution
    start_date = start_date or timezone.now().date()
    if end_date is not None and end_date < start_date:
        raise DomainError("The end date is before the start date.", field="end_date")
    if actor is not None:
        _require_may_grant(actor, role=role, institution=institution, lab=lab)
    if not users_of_institution(institution).filter(pk=user.pk).exists():
        raise DomainError(UNKNOWN_PERSON, field="username")
    if (
        Membership.objects.active()
        .filter(user=user, role=role, institution=institution, lab=lab)
        .exists()
    ):
        raise DomainError(f"{user} already has this role.", field="role")
    membership = Membership.objects.create(
        user=user,
        institution=institution,
        lab=lab,
        role=role,
        start_date=start_date,
        end_date=end_date,
    )
    audit_record(
        actor=actor,
        action="membership.grant",
        target=membership,
        institution_id=institution.pk,
    )
    forget_scope(user)
    return membership


@transaction.atomic
def membership_end(*, actor, membership: Membership, end_date: dt.date | None = None) -> Membership:
    """End a role. end_date is its last day (today by default); history is kept."""
    locked = Membership.objects.select_for_update().get(pk=membership.pk)
    end_date = end_date or timezone.now().date()
    if end_date < locked.start_date:
        raise DomainError("The end date is before the start date.", field="end_date")
    before = snapshot(locked)
    locked.end_date = end_date
    locked.save(update_fields=["end_date"])
    audit_record(
        actor=actor,
        action="membership.end",
        target=locked,
        institution_id=locked.institution_id,
        before=before,
    )
    forget_scope(locked.user)
    return locked


@transaction.atomic
def institution_auto_approve_ceiling_set(
    *, actor, institution: Institution, amount_usd: Decimal
) -> Institution:
    """Set the most any lab's policy may approve on submission. Institution admins only.
    Lowering it takes effect at once: auto-approval checks it when a request is submitted."""
    from labgov.accounts.access import can_set_auto_approve_ceiling

    if actor is not None and not can_set_auto_approve_ceiling(actor, institution.pk):
        raise DomainError("Only the institution's admins set the auto-approval ceiling.")
    if amount_usd is None or amount_usd < 0:
        raise DomainError("The ceiling cannot be negative.", field="amount_usd")
    if amount_usd != amount_usd.quantize(Decimal("0.01")):
        raise DomainError("The ceiling is in whole cents.", field="amount_usd")
    if amount_usd >= Decimal("1e12"):
        raise DomainError("The ceiling is too large.", field="amount_usd")
    locked = Institution.objects.select_for_update().get(pk=institution.pk)
    before = snapshot(locked, ["auto_approve_ceiling_usd"])
    if locked.auto_approve_ceiling_usd == amount_usd:
        return locked
    locked.auto_approve_ceiling_usd = amount_usd
    locked.save(update_fields=["auto_approve_ceiling_usd"])
    audit_record(
        actor=actor,
        action="institution.auto_approve_ceiling",
        target=locked,
        institution_id=locked.pk,
        before=before,
        after=snapshot(locked, ["auto_approve_ceiling_usd"]),
    )
    return locked


@transaction.atomic
def institution_time_zone_set(*, actor, institution: Institution, time_zone: str) -> Institution:
    """Set the time zone whose calendar months are the institution's billing periods.
    Institution admins only, and only while no period is closed and no invoice issued: a
    later change would move edges of periods already frozen."""
    import zoneinfo

    from labgov.accounts.access import can_set_auto_approve_ceiling

    if actor is not None and not can_set_auto_approve_ceiling(actor, institution.pk):
        raise DomainError("Only the institution's admins set its time zone.")
    time_zone = (time_zone or "").strip()
    if time_zone != "UTC" and time_zone not in zoneinfo.available_timezones():
        raise DomainError(
            "Give a time zone by its IANA name, e.g. America/New_York.", field="time_zone"
        )
    locked = Institution.objects.select_for_update().get(pk=institution.pk)
    if locked.time_zone == time_zone:
        return locked
    if locked.closed_periods.exists() or locked.invoices.exclude(status="draft").exists():
        raise DomainError(
            "The time zone cannot change once a period is closed or an invoice issued: "
            "their edges would move.",
            field="time_zone",
        )
    before = snapshot(locked, ["time_zone"])
    locked.time_zone = time_zone
    locked.save(update_fields=["time_zone"])
    audit_record(
        actor=actor,
        action="institution.time_zone",
        target=locked,
        institution_id=locked.pk,
        before=before,
        after=snapshot(locked, ["time_zone"]),
    )
    return locked


def users_of_institution(institution: Institution):
    """The active accounts a lab or institution admin of `institution` may add: anyone who has
    held a role in it, and new accounts that hold no role anywhere yet, unless another
    institution's sign-in made them (they belong to that one). People of other institutions
    are not among them."""
    has_any = Membership.objects.filter(user_id=OuterRef("pk"))
    return User.objects.filter(is_active=True).filter(
        Q(memberships__institution=institution)
        | (~Exists(has_any) & (Q(home_institution__isnull=True) | Q(home_institution=institution)))
    )


def money_deciders(institution_id: int) -> list[User]:
    """The active finance people and institution admins of an institution: those who decide
    proposals that move money (funding proposals, cost transfers) and are told of them."""
    ids = (
        Membership.objects.active()
        .filter(institution_id=institution_id, role__in=INSTITUTION_ROLES)
        .values("user_id")
    )
    return list(User.objects.filter(pk__in=ids, is_active=True))
