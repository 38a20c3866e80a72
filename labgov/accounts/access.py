"""Who sees what. Every page, endpoint and selector asks this module, and nothing else.

- Institution admins: everything in their institution.
- Finance: all money (funding sources, allocations, spend) in their institution, read-only
  except funding sources, imports and lab admins' funding proposals.
- Lab admins: everything of their labs; a funding source's amount, dates and status they only
  propose (finance or an institution admin approves).
- Members: their own allocations, requests and resources.
- A membership that has ended grants nothing from the day after its end date: an ended member
  still sees their own history, but requests nothing and acts on no pod.
- Nobody sees another institution. An object outside a person's scope is a 404, so its
  existence is not revealed; one they may see but not change is a 403.
"""

import datetime as dt
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.signals import post_delete, post_save
from django.http import Http404
from django.utils import timezone

from labgov.accounts.models import Lab, Membership, Role
from labgov.core.compiled import CompiledValues
from labgov.core.joins import joins_as_written


@dataclass(frozen=True)
class Scope:
    user_id: int | None
    admin_institutions: frozenset[int] = frozenset()
    finance_institutions: frozenset[int] = frozenset()
    admin_labs: frozenset[int] = frozenset()
    member_labs: frozenset[int] = frozenset()
    # Labs of the institutions this person administers, resolved once, so lab checks need
    # no further queries.
    institution_labs: frozenset[int] = frozenset()
    # Institutions in which this person is a lab admin.
    lab_admin_institutions: frozenset[int] = frozenset()
    # Every institution of every role they have or had, ended and future ones too (their own
    # history stays theirs to see): read by the page cache's data versions.
    all_institutions: frozenset[int] = frozenset()

    @property
    def money_institutions(self) -> frozenset[int]:
        return self.admin_institutions | self.finance_institutions

    @property
    def managed_labs(self) -> frozenset[int]:
        """Labs whose governance this person may change (lab admin or institution admin)."""
        return self.admin_labs | self.institution_labs

    @property
    def is_empty(self) -> bool:
        return not (
            self.admin_institutions
            or self.finance_institutions
            or self.admin_labs
            or self.member_labs
        )


ANONYMOUS = Scope(user_id=None)


# Moves on whenever a lab or a membership is saved or deleted in this process: a scope kept on
# a user object is read again after any such change (a command that creates a lab and then
# allocates in it, as the same admin, sees its new lab). Another process's changes reach this
# one through fresh user objects (one per request, task or command).
_roles_version = 0


def _roles_changed(**kwargs) -> None:
    global _roles_version
    _roles_version += 1


post_save.connect(_roles_changed, sender=Membership, dispatch_uid="access-roles-membership")
post_delete.connect(_roles_changed, sender=Membership, dispatch_uid="access-roles-membership-d")
post_save.connect(_roles_changed, sender=Lab, dispatch_uid="access-roles-lab")
post_delete.connect(_roles_changed, sender=Lab, dispatch_uid="access-roles-lab-d")


def _roles(user_id: int, day: dt.date):
    """Every role of the person in one query, each marked whether it grants access on `day`
    (the active() rule, in SQL)."""
    active = ExpressionWrapper(
        Q(pk__in=Membership.objects.active(day).filter(user_id=user_id).values("pk")),
        output_field=BooleanField(),
    )
    return (
        Membership.objects.filter(user_id=user_id)
        .annotate(is_active=active)
        .values_list("role", "institution_id", "lab_id", "is_active")
    )


# Every page reads the scope: its SQL is compiled once per process (labgov/core/compiled.py).
_ROLES = CompiledValues(_roles)


def scope_for(user) -> Scope:
    """The user's active roles, read in one query and kept on the user until a lab or a
    membership changes. The system (None) and anonymous visitors have no roles: a check made
    with them refuses, in the check's own words."""
    if user is None or not user.is_authenticated:
        return ANONYMOUS
    cached = getattr(user, "_labgov_scope", None)
    if cached is not None and cached[0] == _roles_version:
        return cached[1]
    version = _roles_version
    admin_inst, finance_inst, admin_labs, member_labs = set(), set(), set(), set()
    lab_admin_inst, all_inst = set(), set()
    for role, institution_id, lab_id, is_active in _ROLES.rows(
        user_id=user.pk, day=timezone.now().date()
    ):
        all_inst.add(institution_id)
        if not is_active:
            continue
        if role == Role.INSTITUTION_ADMIN:
            admin_inst.add(institution_id)
        elif role == Role.FINANCE:
            finance_inst.add(institution_id)
        elif role == Role.LAB_ADMIN:
            admin_labs.add(lab_id)
            lab_admin_inst.add(institution_id)
        else:
            member_labs.add(lab_id)
    institution_labs: set[int] = set()
    if admin_inst:
        from labgov.accounts.models import Lab

        institution_labs = set(
            Lab.objects.filter(institution_id__in=admin_inst).values_list("id", flat=True)
        )
    scope = Scope(
        user_id=user.pk,
        admin_institutions=frozenset(admin_inst),
        finance_institutions=frozenset(finance_inst),
        admin_labs=frozenset(admin_labs),
        member_labs=frozenset(member_labs),
        institution_labs=frozenset(institution_labs),
        lab_admin_institutions=frozenset(lab_admin_inst),
        all_institutions=frozenset(all_inst),
    )
    user._labgov_scope = (version, scope)
    return scope


def forget_scope(user) -> None:
    """Drop the cached scope after a change of roles in the same request."""
    user.__dict__.pop("_labgov_scope", None)


# Filters, one per kind of object. `prefix` lets a related model reuse them
# (an allocation filters through "funding_source__").


def labs_q(user, *, prefix: str = "") -> Q:
    scope = scope_for(user)
    return Q(**{f"{prefix}institution_id__in": scope.money_institutions}) | Q(
        **{f"{prefix}id__in": scope.admin_labs | scope.member_labs}
    )


def can_see_lab(user, *, lab_id: int, institution_id: int) -> bool:
    """labs_q's rule for one lab already read (no query)."""
    scope = scope_for(user)
    return (
        institution_id in scope.money_institutions
        or lab_id in scope.admin_labs
        or lab_id in scope.member_labs
    )


def funding_sources_q(user, *, prefix: str = "") -> Q:
    scope = scope_for(user)
    return Q(**{f"{prefix}lab__institution_id__in": scope.money_institutions}) | Q(
        **{f"{prefix}lab_id__in": scope.admin_labs}
    )


def allocations_q(user) -> Q:
    scope = scope_for(user)
    return funding_sources_q(user, prefix="funding_source__") | Q(user_id=scope.user_id)


def runpod_accounts_q(user) -> Q:
    """Connected accounts whose sync status a person may see: institution admins and finance
    all of their institution's; lab admins their lab's own accounts and the institution-wide
    ones their lab's spend may come from."""
    scope = scope_for(user)
    return (
        Q(institution_id__in=scope.money_institutions)
        | Q(lab_id__in=scope.admin_labs)
        | Q(lab__isnull=True, institution_id__in=scope.lab_admin_institutions)
    )


def can_manage_runpod_account(user, institution_id: int) -> bool:
    return institution_id in scope_for(user).admin_institutions


def resources_q(user) -> Q:
    """Runpod resources: everything of the institution for its admins and finance; for lab
    admins, what their labs pay for, their lab accounts' resources and (so they can claim
    them) unattributed resources of institution-wide accounts; for members, what they pay
    for."""
    scope = scope_for(user)
    return (
        Q(account__institution_id__in=scope.money_institutions)
        | Q(current_allocation__funding_source__lab_id__in=scope.admin_labs)
        | Q(account__lab_id__in=scope.admin_labs)
        | Q(
            current_allocation__isnull=True,
            account__lab__isnull=True,
            account__institution_id__in=scope.lab_admin_institutions,
        )
        | Q(current_allocation__user_id=scope.user_id)
    )


def provisioning_requests_q(user, *, prefix: str = "") -> Q:
    """Provisioning requests: all of the institution for its admins and finance (read-only
    for finance), their labs' for lab admins, and everyone's own."""
    scope = scope_for(user)
    return (
        Q(**{f"{prefix}lab__institution_id__in": scope.money_institutions})
        | Q(**{f"{prefix}lab_id__in": scope.admin_labs})
        | Q(**{f"{prefix}requester_id": scope.user_id})
    )


def can_review_requests(user, lab_id: int) -> bool:
    """Approve, deny, retry and mark provisioned: lab admins of the lab and institution
    admins. Members never, not even in their own lab; finance never."""
    return lab_id in scope_for(user).managed_labs


def can_edit_policy(user, *, institution_id: int, lab_id: int | None) -> bool:
    """A lab's policy: its lab admins and the institution's admins; the institution's default:
    its admins only."""
    scope = scope_for(user)
    if lab_id is None:
        return institution_id in scope.admin_institutions
    return lab_id in scope.managed_labs


def notifications_q(user) -> Q:
    return Q(recipient_id=scope_for(user).user_id) if user.is_authenticated else Q(pk__in=[])


def alerts_q(user) -> Q:
    """Alerts: all of the institution for its admins and finance; their labs' for lab
    admins; and, for everyone, the alerts about their own resources and allocations."""
    scope = scope_for(user)
    return (
        Q(institution_id__in=scope.money_institutions)
        | Q(lab_id__in=scope.admin_labs)
        | Q(owner_id=scope.user_id)
    )


def can_manage_alert(user, *, institution_id: int, lab_id: int | None) -> bool:
    """Acknowledge, snooze, resolve, and act on the resource: the lab's admins and the
    institution's admins; alerts of no lab (an institution-wide account) only the latter."""
    scope = scope_for(user)
    if institution_id in scope.admin_institutions:
        return True
    return lab_id is not None and lab_id in scope.admin_labs


def can_edit_alert_settings(user, *, institution_id: int, lab_id: int | None) -> bool:
    return can_edit_policy(user, institution_id=institution_id, lab_id=lab_id)


def can_manage_lab(user, lab_id: int) -> bool:
    return lab_id in scope_for(user).managed_labs


def can_see_lab_spend(user, *, lab_id: int, institution_id: int) -> bool:
    """A lab's spend dashboard: its lab admins, and its institution's admins and finance.
    Members see their own spend (and their lab's only as a total beside it)."""
    scope = scope_for(user)
    return lab_id in scope.managed_labs or institution_id in scope.money_institutions


def spend_institutions(user) -> frozenset[int]:
    """Institutions whose whole spend (every lab, account and cost center) a person sees."""
    return scope_for(user).money_institutions


def can_write_funding_source(user, *, lab_id: int, institution_id: int) -> bool:
    """Create and change funding sources (amounts, dates, status): finance and institution
    admins. Lab admins propose instead (see can_propose_funding)."""
    return institution_id in scope_for(user).money_institutions


def can_propose_funding(user, lab_id: int) -> bool:
    return lab_id in scope_for(user).admin_labs


def can_decide_funding_proposals(user, institution_id: int) -> bool:
    return institution_id in scope_for(user).money_institutions


def funding_proposals_q(user) -> Q:
    """Proposals: all of the institution for finance and its admins, their labs' for lab
    admins."""
    scope = scope_for(user)
    return Q(institution_id__in=scope.money_institutions) | Q(lab_id__in=scope.admin_labs)


def can_transfer_directly(user, institution_id: int) -> bool:
    """Move spend between allocations at once: finance and institution admins (audited)."""
    return institution_id in scope_for(user).money_institutions


def can_propose_transfer(user, lab_id: int) -> bool:
    """Lab admins propose cost transfers within their lab; finance or an institution admin
    (never the proposer) approves them."""
    return lab_id in scope_for(user).admin_labs


def cost_transfers_q(user) -> Q:
    """Cost transfers: all of the institution for finance and its admins; for lab admins,
    those into or out of their labs' allocations."""
    scope = scope_for(user)
    return (
        Q(institution_id__in=scope.money_institutions)
        | Q(from_funding_source__lab_id__in=scope.admin_labs)
        | Q(to_funding_source__lab_id__in=scope.admin_labs)
    )


def can_import_grants(user, institution_id: int) -> bool:
    return institution_id in scope_for(user).money_institutions


def can_export_period(user, institution_id: int) -> bool:
    """Export a period's invoices: finance and institution admins (all of the institution),
    lab admins (their labs' invoices only, as invoices_q scopes them)."""
    scope = scope_for(user)
    return institution_id in scope.money_institutions | scope.lab_admin_institutions


def billing_records_export_q(user) -> Q:
    """Billing records a person may export: all of the institution's accounts for finance and
    institution admins (unattributed ones too); those attributed to their labs for lab admins."""
    scope = scope_for(user)
    return Q(resource__account__institution_id__in=scope.money_institutions) | Q(
        allocation__funding_source__lab_id__in=scope.admin_labs
    )


def export_jobs_q(user) -> Q:
    """An export file is its requester's alone (the download checks their scope again)."""
    return Q(requested_by_id=scope_for(user).user_id) if user.is_authenticated else Q(pk__in=[])


def can_set_auto_approve_ceiling(user, institution_id: int) -> bool:
    return institution_id in scope_for(user).admin_institutions


def writable_labs_for_funding(user):
    from labgov.accounts.models import Lab

    scope = scope_for(user)
    return Lab.objects.filter(institution_id__in=scope.money_institutions).select_related(
        "institution"
    )


def proposable_labs_for_funding(user):
    from labgov.accounts.models import Lab

    return Lab.objects.filter(id__in=scope_for(user).admin_labs).select_related("institution")


def is_active_in_lab(user_id: int | None, lab_id: int | None) -> bool:
    """Whether the person holds a lab role (member or lab admin) in the lab today. Asked of
    people other than the one signed in (a requester, a pod's owner), so it reads the
    database rather than the cached scope."""
    from labgov.accounts.models import LAB_ROLES

    if user_id is None or lab_id is None:
        return False
    return (
        Membership.objects.active()
        .filter(user_id=user_id, lab_id=lab_id, role__in=LAB_ROLES)
        .exists()
    )


def require_person(actor, what: str) -> None:
    """Refuse, in words, a power only a person has when labgov itself (actor None: a command, a
    scheduled job) asks for it: these decisions need somebody who answers for them."""
    from labgov.core.errors import DomainError

    if actor is None or not getattr(actor, "is_authenticated", False):
        raise DomainError(f"{what} needs a signed-in person; labgov's own jobs cannot do it.")


def deny_unless(allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied


def get_or_404(queryset, **lookup):
    """The one object of the queryset (the person's scope) matching the lookup, else a 404.
    Its foreign keys are joined in the order written (labgov/core/joins.py): a detail page's
    select_related of eight to twelve tables took PostgreSQL longer to plan than to run."""
    queryset = queryset.filter(**lookup)
    with joins_as_written(queryset):
        obj = queryset.first()
    if obj is None:
        raise Http404
    return obj


def is_active_in_institution_lab(user_id: int | None, institution_id: int) -> bool:
    """Whether the person holds a lab role today in any lab of the institution."""
    from labgov.accounts.models import LAB_ROLES

    if user_id is None:
        return False
    return (
        Membership.objects.active()
        .filter(user_id=user_id, institution_id=institution_id, role__in=LAB_ROLES)
        .exists()
    )


def invoices_q(user) -> Q:
    """Invoices: all of the institution for its admins and finance; their labs' for lab
    admins. Members see no invoice, only their allocations' lines (invoice_lines_q)."""
    scope = scope_for(user)
    return Q(institution_id__in=scope.money_institutions) | Q(lab_id__in=scope.admin_labs)


def member_invoice_lines_q(user) -> Q:
    """Lines of issued invoices charged to the person's own allocations."""
    return Q(allocation__user_id=scope_for(user).user_id, invoice__status="issued")


def can_manage_invoices(user, institution_id: int) -> bool:
    """Generate, issue, void, credit and adjust invoices, close periods: finance and the
    institution's admins."""
    return institution_id in scope_for(user).money_institutions


def retention_cases_q(user) -> Q:
    """Retention cases: all of the institution for its admins and finance (finance reads);
    their labs' for lab admins; and everyone's own (the volumes they pay for)."""
    scope = scope_for(user)
    return (
        Q(institution_id__in=scope.money_institutions)
        | Q(lab_id__in=scope.admin_labs)
        | Q(owner_id=scope.user_id)
    )


def can_decide_retention(user, *, institution_id: int, lab_id: int | None) -> bool:
    """Keep, hold, move, request or approve a volume's deletion: the lab's admins and the
    institution's admins; cases of no lab only the latter. Finance and owners only read."""
    return can_manage_alert(user, institution_id=institution_id, lab_id=lab_id)


# Machine-client views (labgov/api) read through these too.


def institutions_q(user) -> Q:
    """Institutions a person holds any role in (a lab role counts for the lab's)."""
    scope = scope_for(user)
    return (
        Q(pk__in=scope.money_institutions)
        | Q(pk__in=scope.lab_admin_institutions)
        | Q(labs__id__in=scope.member_labs)
    )


def memberships_q(user) -> Q:
    """Roles: every one of the institution for its admins; the lab roles of the institution
    for finance (as the lab pages show them); their labs' for lab admins; one's own."""
    scope = scope_for(user)
    return (
        Q(institution_id__in=scope.admin_institutions)
        | Q(lab__institution_id__in=scope.finance_institutions)
        | Q(lab_id__in=scope.admin_labs)
        | Q(user_id=scope.user_id)
    )


def ledger_entries_q(user) -> Q:
    """Ledger entries of the funding sources one sees, and of one's own allocations."""
    scope = scope_for(user)
    return funding_sources_q(user, prefix="funding_source__") | Q(allocation__user_id=scope.user_id)


def spend_q(user) -> Q:
    """Spend rollups: the institution's for its admins and finance, their labs' (their lab
    accounts' unattributed spend included) for lab admins, and everyone's own."""
    scope = scope_for(user)
    return (
        Q(institution_id__in=scope.money_institutions)
        | Q(lab_id__in=scope.admin_labs)
        | Q(user_id=scope.user_id)
    )


def institutions_of(user) -> frozenset[int]:
    """Every institution a person has or had a role in (ended roles too: an ended member still
    sees their own history), and their home institution: the institutions whose data their
    pages may show and their writes may touch (labgov/core/dataversion.py)."""
    if user is None or not user.is_authenticated:
        return frozenset()
    found = scope_for(user).all_institutions  # no query when the page read the scope already
    if user.home_institution_id is not None:
        found = found | {user.home_institution_id}
    return found


def write_institutions(user) -> frozenset[int] | None:
    """The institutions a person's writes may concern, or None for any (staff edit everything
    through the Django admin; an anonymous visitor's writes name no institution)."""
    if user is None or not user.is_authenticated or user.is_staff or user.is_superuser:
        return None
    return institutions_of(user) or None
