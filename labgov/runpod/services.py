import datetime as dt
import threading
from decimal import Decimal

import httpx
from django.conf import settings
from django.db import connections, transaction
from django.db.models import Min, Q
from django.utils import timezone
from django.utils.module_loading import import_string
from django.views.decorators.debug import sensitive_variables

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab
from labgov.audit.services import audit_record
from labgov.core.crypto import decrypt, encrypt
from labgov.core.errors import DomainError
from labgov.core.snapshots import snapshot
from labgov.funding.models import Allocation
from labgov.runpod.attribution import (
    BEGINNING,
    reattribute,
    unattributed_refresh,
)
from labgov.runpod.locks import account_lock
from labgov.runpod.models import (
    DEFAULT_BASE_URL,
    Assignment,
    AssignmentShare,
    AttributionRule,
    Resource,
    ResourceKind,
    RunpodAccount,
    SyncRun,
)
from labgov.runpod.providers import span_reattributed
from labgov.usage.periods import closed_until, require_open

ACCOUNT_AUDIT_FIELDS = [
    "name",
    "institution_id",
    "lab_id",
    "base_url",
    "api_key_last4",
    "write_key_last4",
    "is_active",
]

RUNPOD_API_HOST = "api.runpod.io"


@sensitive_variables()
def client_for_account(account: RunpodAccount):
    """A client with the connection's sync key (reads)."""
    return _client(account, account.api_key_encrypted)


@sensitive_variables()
def write_client_for_account(account: RunpodAccount):
    """A client with the connection's write key, for provisioning and pod actions. Raises
    RunpodAuthError, in words, when the connection is off or holds no write key."""
    from labgov.runpod.errors import RunpodAuthError

    if not account.is_active:
        raise RunpodAuthError(
            f"The Runpod connection {account.name} is deactivated: nothing is created or changed"
            " through it. An institution admin can turn it back on."
        )
    if not account.write_key_encrypted:
        raise RunpodAuthError(
            f"The Runpod connection {account.name} has no write key: an institution admin must"
            " add one (a key with write access) on its page before labgov can create or change"
            " anything on Runpod."
        )
    return _client(account, account.write_key_encrypted)


@sensitive_variables()
def _client(account: RunpodAccount, key_encrypted: str):
    from labgov.runpod.client import RunpodClient
    from labgov.runpod.errors import RunpodRequestInvalid

    # Checked again before every use: a URL saved before the allowed hosts changed, or written
    # to the database by other means, must not receive the key either.
    try:
        base_url = base_url_check(account.base_url)
    except DomainError as exc:
        raise RunpodRequestInvalid(exc.message) from None
    return RunpodClient(base_url=base_url, api_key=decrypt(key_encrypted))


def allowed_hosts_text() -> str:
    named = [h for h in settings.LABGOV_RUNPOD_HOSTS if h]
    extra = f" or a host named in LABGOV_RUNPOD_HOSTS ({', '.join(named)})" if named else ""
    return f"{DEFAULT_BASE_URL}{extra}"


def base_url_check(base_url: str) -> str:
    """The base URL, cleaned, when labgov may send a Runpod key there; else DomainError.

    Only https://api.runpod.io and the hosts the operator named in LABGOV_RUNPOD_HOSTS (which
    may use plain http: a simulator, a proxy) are allowed; an admin cannot point a stored key
    at a service of their choosing. The URL is parsed by the same library that will send the
    request, so what is checked is what is called.
    """
    raw = (base_url or DEFAULT_BASE_URL).strip()
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise DomainError(f"The base URL must look like {DEFAULT_BASE_URL}.", field="base_url")
    if url.userinfo:
        raise DomainError(
            "The base URL must not contain a user name or password: the API key is the only"
            " credential, and it goes in its own field.",
            field="base_url",
        )
    if url.query or url.fragment:
        raise DomainError("The base URL cannot have a query or a fragment.", field="base_url")
    host = url.host.lower()
    named = {h.strip().strip("[]").lower() for h in settings.LABGOV_RUNPOD_HOSTS if h.strip()}
    runpod = host == RUNPOD_API_HOST and url.scheme == "https" and url.port in (None, 443)
    if not runpod and host not in named:
        raise DomainError(
            f"Runpod keys are only sent to {allowed_hosts_text()}. To use another server (a"
            " proxy, a simulator), the operator must name its host in LABGOV_RUNPOD_HOSTS.",
            field="base_url",
        )
    path = url.path.rstrip("/").removesuffix("/v2")
    return str(url.copy_with(path=path or "/")).rstrip("/")


@sensitive_variables()
def _clean_key(api_key: str, *, field: str = "api_key") -> str:
    api_key = (api_key or "").strip()
    if len(api_key) < 6 or any(c.isspace() for c in api_key):
        raise DomainError("That does not look like a Runpod API key.", field=field)
    return api_key


@sensitive_variables("api_key", "write_key")
@transaction.atomic
def account_connect(
    *,
    actor,
    institution: Institution,
    name: str,
    api_key: str,
    write_key: str = "",
    base_url: str = DEFAULT_BASE_URL,
    lab: Lab | None = None,
) -> RunpodAccount:
    """Connect a Runpod account: `api_key` syncs (read-only is enough), `write_key` (optional)
    provisions. Either may be the same key when one key has both rights."""
    name = name.strip()
    if not name:
        raise DomainError("The account needs a name.", field="name")
    if lab is not None and lab.institution_id != institution.pk:
        raise DomainError("The lab belongs to another institution.", field="lab")
    if RunpodAccount.objects.filter(institution=institution, name=name).exists():
        raise DomainError(f"An account called {name} is connected already.", field="name")
    base_url = base_url_check(base_url)
    api_key = _clean_key(api_key)
    write_key = _clean_key(write_key, field="write_key") if write_key else ""
    account = RunpodAccount.objects.create(
        institution=institution,
        lab=lab,
        name=name,
        base_url=base_url,
        api_key_encrypted=encrypt(api_key),
        api_key_last4=api_key[-4:],
        write_key_encrypted=encrypt(write_key) if write_key else "",
        write_key_last4=write_key[-4:],
    )
    audit_record(
        actor=actor,
        action="runpod_account.connect",
        target=account,
        institution_id=institution.pk,
        after=snapshot(account, ACCOUNT_AUDIT_FIELDS),
    )
    return account


@sensitive_variables("api_key", "write_key")
@transaction.atomic
def account_update(
    *,
    actor,
    account: RunpodAccount,
    name: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    write_key: str | None = None,
    remove_write_key: bool = False,
    lab: Lab | None | str = "unchanged",
    is_active: bool | None = None,
) -> RunpodAccount:
    """Change an account. An empty key keeps the stored one, except when the base URL
    changes: a stored key is only ever sent where it was entered for, so then every stored
    key must be entered again (or the write key removed)."""
    locked = RunpodAccount.objects.select_for_update().get(pk=account.pk)
    before = snapshot(locked, ACCOUNT_AUDIT_FIELDS)
    if name is not None:
        name = name.strip()
        if not name:
            raise DomainError("The account needs a name.", field="name")
        if (
            RunpodAccount.objects.filter(institution_id=locked.institution_id, name=name)
            .exclude(pk=locked.pk)
            .exists()
        ):
            raise DomainError(f"An account called {name} is connected already.", field="name")
        locked.name = name
    if base_url is not None:
        base_url = base_url_check(base_url)
        if base_url != locked.base_url:
            if not api_key:
                raise DomainError(
                    "Enter the sync key again to change the base URL: a stored key is only"
                    " sent to the address it was entered for.",
                    field="api_key",
                )
            if locked.write_key_encrypted and not write_key and not remove_write_key:
                raise DomainError(
                    "Enter the write key again (or remove it) to change the base URL: a stored"
                    " key is only sent to the address it was entered for.",
                    field="write_key",
                )
        locked.base_url = base_url
    replaced = []
    if api_key:
        api_key = _clean_key(api_key)
        locked.api_key_encrypted = encrypt(api_key)
        locked.api_key_last4 = api_key[-4:]
        replaced.append("sync key replaced")
    if remove_write_key:
        if write_key:
            raise DomainError(
                "Either enter a new write key or remove it, not both.", field="write_key"
            )
        if locked.write_key_encrypted:
            replaced.append("write key removed")
        locked.write_key_encrypted = ""
        locked.write_key_last4 = ""
    elif write_key:
        write_key = _clean_key(write_key, field="write_key")
        locked.write_key_encrypted = encrypt(write_key)
        locked.write_key_last4 = write_key[-4:]
        replaced.append("write key replaced")
    if lab != "unchanged":
        if lab is not None and lab.institution_id != locked.institution_id:
            raise DomainError("The lab belongs to another institution.", field="lab")
        locked.lab = lab
    if is_active is not None:
        locked.is_active = is_active
    after = snapshot(locked, ACCOUNT_AUDIT_FIELDS)
    if after == before and not replaced:
        return locked
    locked.save()
    audit_record(
        actor=actor,
        action="runpod_account.update",
        target=locked,
        institution_id=locked.institution_id,
        before=before,
        after=after,
        note="; ".join(replaced).capitalize(),
    )
    return locked


@transaction.atomic
def account_set_active(*, actor, account: RunpodAccount, active: bool) -> RunpodAccount:
    """Turn a connection off (no syncing, by beat or by hand, and no provisioning through it;
    its history stays, and counts) or back on."""
    locked = RunpodAccount.objects.select_for_update().get(pk=account.pk)
    if locked.is_active == active:
        return locked
    locked.is_active = active
    locked.save(update_fields=["is_active"])
    audit_record(
        actor=actor,
        action="runpod_account.activate" if active else "runpod_account.deactivate",
        target=locked,
        institution_id=locked.institution_id,
        before={"is_active": not active},
        after={"is_active": active},
    )
    return locked


@transaction.atomic
def account_confirm_cluster_limit(
    *, actor, account: RunpodAccount, confirmed: bool, note: str = ""
) -> RunpodAccount:
    """An institution admin confirms (or withdraws) that Runpod raised this account's spending
    limit for clusters over 2 pods / 16 GPUs; approving such a cluster needs it. Audited."""
    if actor is None or not access.can_manage_runpod_account(actor, account.institution_id):
        raise DomainError("Only an institution admin can confirm an account's spending limit.")
    locked = RunpodAccount.objects.select_for_update().get(pk=account.pk)
    was = locked.cluster_limit_confirmed_at is not None
    if was == confirmed:
        return locked
    locked.cluster_limit_confirmed_at = timezone.now() if confirmed else None
    locked.cluster_limit_confirmed_by = actor if confirmed else None
    locked.save(update_fields=["cluster_limit_confirmed_at", "cluster_limit_confirmed_by"])
    audit_record(
        actor=actor,
        action="runpod_account.cluster_limit_confirm"
        if confirmed
        else "runpod_account.cluster_limit_withdraw",
        target=locked,
        institution_id=locked.institution_id,
        before={"cluster_limit_confirmed": was},
        after={"cluster_limit_confirmed": confirmed},
        note=(note or "").strip()[:500],
    )
    return locked


def account_test_connection(*, account: RunpodAccount) -> list:
    """One check per stored key, in words: whether it can read the account."""
    from labgov.runpod.client import ConnectionCheck
    from labgov.runpod.errors import RunpodError

    keys = [("Sync key", account.api_key_last4, client_for_account)]
    if account.write_key_encrypted:
        keys.append(("Write key", account.write_key_last4, _write_key_client))
    checks = []
    for label, last4, factory in keys:
        try:
            with factory(account) as client:
                result = client.check_connection()
        except RunpodError as exc:
            result = ConnectionCheck(False, exc.message)
        checks.append(
            ConnectionCheck(result.ok, f"{label} …{last4}: {result.message}", result.pod_ids)
        )
    both_see_pods = len(checks) == 2 and all(c.ok and c.pod_ids for c in checks)
    if both_see_pods and checks[0].pod_ids.isdisjoint(checks[1].pod_ids):
        checks.append(
            ConnectionCheck(
                False,
                "The two keys see different pods: they seem to belong to different Runpod"
                " accounts, so what the write key creates would never be synced. Put both"
                " keys of one account in a connection.",
            )
        )
    return checks


def _write_key_client(account: RunpodAccount):
    # Tested even while the connection is off, so a key can be checked before turning it on.
    return _client(account, account.write_key_encrypted)


def sync_request(*, actor, account: RunpodAccount) -> None:
    """Queue a sync now (after the current transaction commits)."""
    if not account.is_active:
        raise DomainError(f"{account.name} is deactivated: turn it on again to sync it.")
    if account.is_focus:
        raise DomainError(
            f"{account.name} is a FOCUS billing source: its bills are imported from files, "
            "not synced."
        )

    args = (account.pk, SyncRun.Trigger.MANUAL, actor.pk if actor else None)
    if settings.LABGOV_SYNC_NOW_BESIDE:
        transaction.on_commit(lambda: _sync_beside(*args))
        return
    # The task by its name, as core/queue.py does: runpod.tasks imports the sync, which imports
    # these services. Unlike task_enqueue_on_commit, not robust, as before.
    transaction.on_commit(lambda: import_string("labgov.runpod.tasks.sync_account").delay(*args))


def _sync_beside(*args) -> threading.Thread:
    """Embedded mode (no broker: `make run`): the sync runs in a thread of this process, so
    the request that asked for it answers at once and the account page follows the sync's
    progress, instead of the request running it (a first sync takes seconds). The thread has
    its own database connection, closed when it ends."""

    def run():
        try:
            import_string("labgov.runpod.tasks.sync_account")(*args)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=f"labgov-sync-{args[0]}", daemon=True)
    thread.start()
    return thread


def rule_makers_note(account: RunpodAccount) -> str:
    """Who may make rules on an account, in words."""
    if account.lab_id is None:
        return (
            f"{account.name} is shared by the institution's labs: its rules are made by an "
            "institution admin."
        )
    return f"{account.name} is {account.lab}'s own account: its lab admins make its rules."


def rule_accounts_q(user) -> Q:
    """Accounts on which a person may make rules. An account shared by several labs (tied to
    none) is the institution's: a lab admin's rule there could claim other labs' resources, so
    only its institution admins make rules on it; a lab's own account, its lab admins too."""
    scope = access.scope_for(user)
    return Q(institution_id__in=scope.admin_institutions) | Q(lab_id__in=scope.managed_labs)


def _require_rule_maker(actor, account: RunpodAccount, lab) -> bool:
    """Refuse a rule the actor may not make; True when the actor is an institution admin.
    The system (None: a command, the demo seeder) makes rules from now on; starting one
    earlier moves spend already incurred, which takes a person (an institution admin)."""
    if actor is None:
        return False
    scope = access.scope_for(actor)
    institution_admin = account.institution_id in scope.admin_institutions
    if not (institution_admin or account.lab_id in scope.managed_labs):
        raise DomainError(rule_makers_note(account), field="account")
    if lab.pk not in scope.managed_labs:
        raise DomainError("You do not manage the allocation's lab.", field="allocation")
    return institution_admin


@transaction.atomic
def rule_create(
    *,
    actor,
    account: RunpodAccount,
    kind: str,
    pattern: str,
    allocation: Allocation,
    starts_at: dt.datetime | None = None,
) -> AttributionRule:
    """A rule paying matching resources from `allocation`, from when it is made on. Only an
    institution admin may start it earlier, and never inside a period finance has closed."""
    account_lock(account.pk)  # first: the rule re-attributes synced spend (sync.py)
    pattern = pattern.strip()
    if kind not in AttributionRule.Kind.values:
        raise DomainError(f"Unknown rule kind {kind!r}.", field="kind")
    if kind == AttributionRule.Kind.ACCOUNT:
        pattern = ""
    elif not pattern:
        raise DomainError("The rule needs a pattern.", field="pattern")
    if kind == AttributionRule.Kind.ENV_VAR and "=" not in pattern:
        raise DomainError("Write the variable as NAME=value.", field="pattern")
    if kind == AttributionRule.Kind.TAG and "=" not in pattern:
        raise DomainError("Write the tag as key=value (e.g. costcenter=CC-1042).", field="pattern")
    lab = allocation.funding_source.lab
    if lab.institution_id != account.institution_id:
        raise DomainError("The allocation belongs to another institution.", field="allocation")
    if account.lab_id is not None and account.lab_id != lab.pk:
        raise DomainError("This Runpod account belongs to another lab.", field="account")
    institution_admin = _require_rule_maker(actor, account, lab)
    now = timezone.now()
    if starts_at is None:
        starts_at = now
    elif starts_at < now:
        if not institution_admin:
            raise DomainError(
                "A rule applies from when it is made; only an institution admin may start it "
                "earlier.",
                field="starts_at",
            )
        require_open(account.institution_id, starts_at, what="A rule starting then")
    if AttributionRule.objects.filter(
        account=account, kind=kind, pattern=pattern, is_active=True
    ).exists():
        raise DomainError("An active rule with this pattern exists already.", field="pattern")
    rule = AttributionRule.objects.create(
        lab=lab,
        account=account,
        kind=kind,
        pattern=pattern,
        allocation=allocation,
        starts_at=starts_at,
        created_by=actor,
        created_at=now,
    )
    audit_record(
        actor=actor,
        action="attribution_rule.create",
        target=rule,
        institution_id=account.institution_id,
        after={
            "account_id": account.pk,
            "kind": kind,
            "pattern": pattern,
            "allocation_id": allocation.pk,
            "starts_at": starts_at.isoformat(),
        },
        note="starts before it was made" if starts_at < now else "",
    )
    # Apply it to what it matches now; their spend follows from where each assignment starts.
    from labgov.runpod.attribution import rules_apply

    newly = rules_apply(account=account)
    if newly:
        since = Assignment.objects.filter(resource_id__in=newly).aggregate(first=Min("starts_at"))[
            "first"
        ]
        days = reattribute(resource_ids=newly, since=since)
        span_reattributed(account=account, days=days)
        unattributed_refresh(resource_ids=newly)
    return rule


@transaction.atomic
def rule_deactivate(*, actor, rule: AttributionRule) -> AttributionRule:
    """Stop a rule from claiming new resources. Resources it assigned keep their assignment."""
    locked = AttributionRule.objects.select_for_update().get(pk=rule.pk)
    if not locked.is_active:
        return locked
    locked.is_active = False
    locked.save(update_fields=["is_active"])
    audit_record(
        actor=actor,
        action="attribution_rule.deactivate",
        target=locked,
        institution_id=locked.account.institution_id,
        before={"is_active": True},
        after={"is_active": False},
    )
    return locked


@transaction.atomic
def resource_assign(
    *,
    actor,
    resource: Resource,
    allocation: Allocation | None,
    starts_at: dt.datetime | None = None,
    source: str = Assignment.Source.MANUAL,
    note: str = "",
    shares: list[tuple[Allocation, Decimal]] | None = None,
) -> Assignment:
    """Assign a resource's spend to an allocation (None: explicitly unattributed).

    A resource's first assignment covers its whole history in open periods; a re-assignment
    takes effect from `starts_at` (default now), so spend before it stays where it was. No
    assignment starts inside a period finance has closed. With `shares` (split funding, see
    labgov/transfers/splits.py, which checks who may and what) the spend is paid by several
    allocations in those percentages; `allocation` is then the largest share.
    """
    if shares is not None and (
        sum((p for _, p in shares), Decimal(0)) != 100
        or allocation is None
        or allocation.pk != shares[0][0].pk
        or len({a.pk for a, _ in shares}) != len(shares)
    ):
        raise DomainError("Shares must name distinct allocations and add up to exactly 100%.")
    # The account before the resource, as every writer of synced spend (sync.py): a slice in
    # flight share-locks the resources its records name.
    account_lock(resource.account_id)
    locked = Resource.objects.select_for_update().get(pk=resource.pk)
    if locked.kind == ResourceKind.ENDPOINT:
        raise DomainError("Account-wide endpoint spend has no resource to assign.")
    if (
        allocation is not None
        and allocation.funding_source.institution_id != locked.account.institution_id
    ):
        raise DomainError("The allocation belongs to another institution.", field="allocation")
    has_history = Assignment.objects.filter(resource=locked).exists()
    if starts_at is None:
        # A first assignment covers the history that is still open.
        closed = closed_until(locked.account.institution_id)
        starts_at = timezone.now() if has_history else (closed or BEGINNING)
    else:
        require_open(locked.account.institution_id, starts_at, what="This assignment")
    if has_history:
        latest = Assignment.objects.filter(resource=locked).order_by("-starts_at", "-id").first()
        if starts_at < latest.starts_at:
            raise DomainError(
                "A re-assignment cannot start before the current assignment "
                f"({latest.starts_at:%Y-%m-%d %H:%M} UTC).",
                field="starts_at",
            )
    before = {"allocation_id": locked.current_allocation_id}
    assignment = Assignment.objects.create(
        resource=locked,
        allocation=allocation,
        starts_at=starts_at,
        source=source,
        created_by=actor if actor and actor.pk else None,
        note=note,
    )
    if shares:
        AssignmentShare.objects.bulk_create(
            AssignmentShare(assignment=assignment, allocation=a, share_percent=p) for a, p in shares
        )
    locked.current_allocation = allocation
    locked.save(update_fields=["current_allocation"])
    for path in settings.LABGOV_AFTER_ASSIGN:
        import_string(path)(
            actor=actor, resource=locked, before_allocation_id=before["allocation_id"]
        )
    days = reattribute(resource_ids=[locked.pk], since=starts_at)
    span_reattributed(account=locked.account, days=days)
    unattributed_refresh(resource_ids=[locked.pk])
    audit_record(
        actor=actor,
        action="resource.assign",
        target=locked,
        institution_id=locked.account.institution_id,
        before=before,
        after={
            "allocation_id": allocation.pk if allocation else None,
            "starts_at": starts_at.isoformat(),
            "source": source,
            **({"shares": {str(a.pk): str(p) for a, p in shares}} if shares else {}),
        },
        note=note,
    )
    return assignment


@transaction.atomic
def account_set_manual_balance(*, actor, account: RunpodAccount, balance_usd) -> RunpodAccount:
    """The balance an admin read off Runpod's console, for balance alerts where Runpod's API
    reports none (its GraphQL API, the only one with the balance, retires in early 2027).
    None clears it."""
    locked = RunpodAccount.objects.select_for_update().get(pk=account.pk)
    if balance_usd is not None and balance_usd < 0:
        raise DomainError("A balance cannot be negative.", field="balance_usd")
    before = {"manual_balance_usd": _plain_money(locked.manual_balance_usd)}
    locked.manual_balance_usd = balance_usd
    locked.manual_balance_at = timezone.now() if balance_usd is not None else None
    locked.save(update_fields=["manual_balance_usd", "manual_balance_at"])
    audit_record(
        actor=actor,
        action="runpod_account.manual_balance",
        target=locked,
        institution_id=locked.institution_id,
        before=before,
        after={"manual_balance_usd": _plain_money(balance_usd)},
    )
    return locked


def _plain_money(value):
    return None if value is None else str(value)
