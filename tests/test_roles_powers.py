"""The README's roles × powers table, performed: every cell tries its power as a person of that
role (through the services, which enforce it whatever page or script calls them) and checks
that the attempt succeeds exactly where the table says "yes"."""

import datetime as dt
from contextlib import nullcontext
from decimal import Decimal as D
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from labgov.accounts.services import institution_auto_approve_ceiling_set, membership_grant
from labgov.alerts.models import Alert
from labgov.alerts.services import alert_pod_action, may_act_on_pod
from labgov.core.errors import DomainError
from labgov.funding.imports import grants_import_csv
from labgov.funding.models import Allocation
from labgov.funding.proposals import (
    funding_proposal_approve,
    funding_proposal_create,
    proposal_values_from,
)
from labgov.funding.services import allocation_create, funding_source_create, funding_source_update
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import policy_save, request_approve, request_save, request_submit
from tests.alerts.conftest import make_pod
from tests.factories import (
    AllocationFactory,
    InstitutionFactory,
    LabFactory,
    MembershipFactory,
    RunpodAccountFactory,
)
from tests.provisioning.conftest import POD_VALUES, catalog  # noqa: F401 - a fixture

README = Path(__file__).resolve().parent.parent / "README.md"
COLUMNS = {
    "Institution admin": "inst_admin",
    "Finance": "finance",
    "Lab admin": "lab_admin",
    "Member": "member",
    "Ended member": "ended_member",
}


def _table() -> dict[tuple[str, str], bool]:
    text = README.read_text()
    block = text.split("<!-- roles-powers:start -->")[1].split("<!-- roles-powers:end -->")[0]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in block.strip().splitlines()
    ]
    header, _rule, *body = rows
    roles = [COLUMNS[name] for name in header[1:]]
    cells = {}
    for power, *answers in body:
        assert len(answers) == len(roles), power
        for role, answer in zip(roles, answers, strict=True):
            word = answer.split()[0]
            assert word in ("yes", "no"), f"{power} / {role}: {answer!r}"
            cells[(power, role)] = word == "yes"
    return cells


TABLE = _table()


def _ended_member(lab):
    return MembershipFactory(
        role="member", lab=lab, end_date=timezone.now().date() - dt.timedelta(days=1)
    ).user


def _someone(world, role):
    if role == "ended_member":
        return _ended_member(world.lab)
    return getattr(world, role)


def _request(user, allocation):
    return request_save(actor=user, allocation=allocation, values=dict(POD_VALUES))


# Each power: a function (world, person) that attempts it and returns whether it happened. A
# refusal is a DomainError or PermissionDenied; anything else is a bug and fails the test.


def set_funding(world, who):
    fs = world.funding_source
    funding_source_update(actor=who, funding_source=fs, amount_usd=D("12000.00"))
    funding_source_create(
        actor=who,
        lab=world.lab,
        name="Table grant",
        start_date=fs.start_date,
        end_date=fs.end_date,
        amount_usd=D("100.00"),
    )
    return True


def propose_funding(world, who):
    values = {**proposal_values_from(world.funding_source), "amount_usd": D("12000.00")}
    funding_proposal_create(
        actor=who, lab=world.lab, funding_source=world.funding_source, values=values
    )
    return True


def decide_proposal(world, who):
    proposer = MembershipFactory(role="lab_admin", lab=world.lab).user
    values = {**proposal_values_from(world.funding_source), "amount_usd": D("12000.00")}
    proposal = funding_proposal_create(
        actor=proposer, lab=world.lab, funding_source=world.funding_source, values=values
    )
    return funding_proposal_approve(actor=who, proposal=proposal).state == "approved"


def import_grants(world, who):
    csv = b"lab,name,award_number,start_date,end_date,amount_usd\n"
    csv += b"vision,Imported,T-1,2026-01-01,2026-12-31,5\n"
    return grants_import_csv(actor=who, institution=world.institution, data=csv).ok


def allocate_to_other(world, who):
    fs = world.funding_source
    allocation_create(
        actor=who,
        funding_source=fs,
        user=world.member,
        cap_usd=D("10"),
        start_date=fs.start_date,
        end_date=fs.end_date,
    )
    return True


def allocate_to_self(world, who):
    fs = world.funding_source
    allocation_create(
        actor=who,
        funding_source=fs,
        user=who,
        cap_usd=D("10"),
        start_date=fs.start_date,
        end_date=fs.end_date,
    )
    return True


def set_ceiling(world, who):
    institution_auto_approve_ceiling_set(
        actor=who, institution=world.institution, amount_usd=D("10")
    )
    return True


def set_lab_policy(world, who):
    policy_save(
        actor=who,
        institution=world.institution,
        lab=world.lab,
        values={
            "allowed_models": ["pod"],
            "allowed_clouds": ["SECURE"],
            "auto_approve_under_usd": D("100"),
        },
    )
    return True


def add_person_of_institution(world, who):
    newcomer = MembershipFactory(role="member", lab=world.other_lab).user
    membership_grant(actor=who, user=newcomer, role="member", lab=world.lab)
    return True


def add_person_of_elsewhere(world, who):
    stranger = MembershipFactory(role="member", lab=LabFactory(institution=InstitutionFactory()))
    membership_grant(actor=who, user=stranger.user, role="member", lab=world.lab)
    return True


def request_capacity(world, who):
    own = AllocationFactory(funding_source=world.funding_source, user=who)
    request_submit(actor=who, req=_request(who, own))
    return True


def approve_others_request(world, who):
    requester = MembershipFactory(role="member", lab=world.lab).user
    allocation = AllocationFactory(funding_source=world.funding_source, user=requester)
    req = request_submit(actor=requester, req=_request(requester, allocation))
    return request_approve(actor=who, req=req).state != ProvisioningRequest.State.SUBMITTED


def _own_submitted_request(world, who, *, auto_approve_under: str):
    policy_save(
        actor=None,
        institution=world.institution,
        lab=world.lab,
        values={
            "allowed_models": ["pod"],
            "allowed_clouds": ["SECURE"],
            "auto_approve_under_usd": D(auto_approve_under),
        },
    )
    own = AllocationFactory(funding_source=world.funding_source, user=who)
    return request_submit(actor=who, req=_request(who, own))


def approve_own_request_by_hand(world, who):
    req = _own_submitted_request(world, who, auto_approve_under="0")
    return request_approve(actor=who, req=req).state != ProvisioningRequest.State.SUBMITTED


def own_request_auto_approved(world, who):
    # The lab's rule covers the $351.20 request: only the requester's power stops it.
    req = _own_submitted_request(world, who, auto_approve_under="1000")
    return req.auto_approved


def act_on_own_pod(world, who):
    own = AllocationFactory(funding_source=world.funding_source, user=who)
    account = RunpodAccountFactory(institution=world.institution)
    pod = make_pod(account, own, status="RUNNING")
    alert = Alert.objects.create(
        institution=world.institution,
        lab=world.lab,
        owner=who,
        resource=pod,
        kind="idle_gpu",
        subject_key=f"resource:{pod.pk}",
        title="Idle pod",
    )
    return may_act_on_pod(who, alert, "stop") and may_act_on_pod(who, alert, "start")


def terminate_from_alert(world, who):
    # The pod of someone else in the lab, stopped and billing for its disk; a Runpod client
    # that would accept the terminate, so only the power decides.
    account = RunpodAccountFactory(institution=world.institution)
    pod = make_pod(account, world.allocation, status="EXITED")
    alert = Alert.objects.create(
        institution=world.institution,
        lab=world.lab,
        owner=world.allocation.user,
        resource=pod,
        kind="stopped_pod_disk",
        subject_key=f"resource:{pod.pk}",
        title="Stopped pod billing",
    )
    client = SimpleNamespace(pod_action=lambda runpod_id, action: None)
    alert_pod_action(
        actor=who, alert=alert, action="terminate", client_factory=lambda a: nullcontext(client)
    )
    return True


def read_lab_history(world, who):
    gone = _ended_member(world.lab)
    allocation = AllocationFactory(funding_source=world.funding_source, user=gone)
    req = ProvisioningRequest.objects.create(
        requester=gone, allocation=allocation, lab=world.lab, title="Old run"
    )
    return (
        Allocation.objects.visible_to(who).filter(pk=allocation.pk).exists()
        and ProvisioningRequest.objects.visible_to(who).filter(pk=req.pk).exists()
    )


def _spent_pod(world):
    """A pod paid by the member's allocation with an hour of this month's spend, and a second
    allocation of the lab to move it to."""
    from labgov.runpod.models import BillingRecord
    from labgov.runpod.services import resource_assign
    from tests.factories import ResourceFactory

    month = timezone.now().date().replace(day=1)
    start = dt.datetime.combine(month, dt.time(), tzinfo=dt.UTC)
    pod = ResourceFactory(account=RunpodAccountFactory(institution=world.institution))
    BillingRecord.objects.create(
        resource=pod,
        kind="pod",
        bucket_start=start,
        bucket_end=start + dt.timedelta(hours=1),
        total_usd=D("3"),
        gpu_usd=D("3"),
    )
    resource_assign(actor=None, resource=pod, allocation=world.allocation)
    second = AllocationFactory(funding_source=world.funding_source, user=None, project_name="B")
    return pod, second, month


def _transfer(world, who):
    from labgov.transfers.services import cost_transfer_create

    pod, second, month = _spent_pod(world)
    return cost_transfer_create(
        actor=who,
        account=pod.account,
        from_allocation=world.allocation,
        to_allocation=second,
        month=month,
        amount_usd=D("1"),
        justification="Wrong grant",
    )


def transfer_at_once(world, who):
    return _transfer(world, who).state == "applied"


def propose_transfer(world, who):
    return _transfer(world, who).state == "pending"


def approve_transfer(world, who):
    from labgov.transfers.services import cost_transfer_approve

    proposal = _transfer(world, world.lab_admin)
    return cost_transfer_approve(actor=who, transfer=proposal).state == "applied"


def split_resource(world, who):
    from labgov.transfers.splits import resource_split_set

    pod, second, month = _spent_pod(world)
    today = dt.datetime.combine(timezone.now().date(), dt.time(), tzinfo=dt.UTC)
    shares = [(world.allocation, D(60)), (second, D(40))]
    return resource_split_set(actor=who, resource=pod, shares=shares, starts_at=today) is not None


def _yesterday() -> dt.datetime:
    return dt.datetime.combine(timezone.now().date() - dt.timedelta(days=1), dt.time(), dt.UTC)


def _billed_pod(world, moment: dt.datetime):
    """A pod paid by the member's allocation with an hour of spend at `moment`, and a second
    allocation of the lab."""
    from labgov.runpod.models import BillingRecord
    from labgov.runpod.services import resource_assign
    from tests.factories import ResourceFactory

    pod = ResourceFactory(account=RunpodAccountFactory(institution=world.institution))
    BillingRecord.objects.create(
        resource=pod,
        kind="pod",
        bucket_start=moment,
        bucket_end=moment + dt.timedelta(hours=1),
        total_usd=D("3"),
        gpu_usd=D("3"),
    )
    resource_assign(actor=None, resource=pod, allocation=world.allocation)
    second = AllocationFactory(funding_source=world.funding_source, user=None, project_name="B")
    return pod, second


def _back_dated_split(world, who):
    """All of yesterday's spend of the pod to the second allocation, from yesterday on."""
    from labgov.transfers.splits import resource_split_set

    pod, second = _billed_pod(world, _yesterday())
    return resource_split_set(
        actor=who, resource=pod, shares=[(second, D(100))], starts_at=_yesterday()
    )


def back_dated_move_at_once(world, who):
    from labgov.runpod.models import Assignment

    return isinstance(_back_dated_split(world, who), Assignment)


def propose_back_dated_move(world, who):
    from labgov.transfers.models import SpendMove

    done = _back_dated_split(world, who)
    return isinstance(done, SpendMove) and done.state == "pending"


def approve_back_dated_move(world, who):
    from labgov.transfers.splits import spend_move_approve

    proposal = _back_dated_split(world, world.lab_admin)
    return spend_move_approve(actor=who, move=proposal).state == "applied"


def _last_month_draft(world):
    """Last month's draft of the standing grant, a pod billed on its 10th."""
    from labgov.invoicing.services import invoices_generate

    month = (timezone.now().date().replace(day=1) - dt.timedelta(days=1)).replace(day=1)
    _billed_pod(world, dt.datetime.combine(month.replace(day=10), dt.time(), dt.UTC))
    invoices_generate(actor=None, institution=world.institution, month=month)
    return world.funding_source.invoices.get(month=month), month


def _credit(invoice, who):
    from labgov.invoicing.services import invoice_line_add

    invoice_line_add(actor=who, invoice=invoice, kind="credit", amount_usd=D("1.00"), reason="T")


def issue_own_change(world, who):
    from labgov.invoicing.services import invoice_issue

    draft, _ = _last_month_draft(world)
    _credit(draft, who)
    return invoice_issue(actor=who, invoice=draft).status == "issued"


def issue_others_change(world, who):
    from labgov.invoicing.services import invoice_issue

    draft, _ = _last_month_draft(world)
    _credit(draft, MembershipFactory(role="finance", lab=None, institution=world.institution).user)
    return invoice_issue(actor=who, invoice=draft).status == "issued"


def change_closed_month(world, who):
    from labgov.invoicing.services import invoice_issue, invoice_void
    from labgov.usage.periods import period_close

    draft, month = _last_month_draft(world)
    issued = invoice_issue(actor=None, invoice=draft)
    period_close(actor=None, institution=world.institution, year=month.year, month=month.month)
    invoice_void(actor=who, invoice=issued, reason="Rebill")
    return True


def _retention_case(world):
    from labgov.retention.policies import Resolver
    from labgov.retention.services import case_open
    from labgov.retention.triggers import candidates
    from tests.alerts.conftest import make_volume

    account = RunpodAccountFactory(institution=world.institution)
    volume = make_volume(account, world.allocation)
    found = candidates(
        world.institution.pk, resolver=Resolver(world.institution.pk), resource_ids=[volume.pk]
    )
    return case_open(actor=None, candidate=found[0])


def approve_others_deletion(world, who):
    from labgov.retention.services import deletion_approve, deletion_request

    requester = MembershipFactory(role="lab_admin", lab=world.lab).user
    case = deletion_request(actor=requester, case=_retention_case(world))
    return deletion_approve(actor=who, case=case).state == "deletion_approved"


def approve_own_deletion(world, who):
    from labgov.retention.services import deletion_approve, deletion_request

    case = deletion_request(actor=who, case=_retention_case(world))
    return deletion_approve(actor=who, case=case).state == "deletion_approved"


def confirm_tag_claim(world, who):
    """A pod on the shared account carrying the tag of `who`'s own allocation when they are a
    member (the holder), else of the lab member's: a claim waits until someone confirms it."""
    from labgov.runpod.attribution import rules_apply
    from labgov.runpod.models import TagClaim
    from labgov.runpod.tag_claims import tag_claim_confirm
    from tests.factories import ResourceFactory

    holds = who.memberships.filter(role="member", lab=world.lab).exists()
    allocation = AllocationFactory(funding_source=world.funding_source, user=who) if holds else None
    allocation = allocation or world.allocation
    account = RunpodAccountFactory(institution=world.institution)  # shared: no lab of its own
    pod = ResourceFactory(account=account, env={"LABGOV_ALLOCATION": allocation.tag_code})
    rules_apply(account=account)
    claim = TagClaim.objects.get(resource=pod)
    tag_claim_confirm(actor=who, claim=claim)
    pod.refresh_from_db()
    return pod.current_allocation_id == allocation.pk


def include_blocking_pod(world, who):
    from labgov.retention.services import case_include_pod

    case = _retention_case(world)
    pod = make_pod(
        case.resource.account,
        world.allocation,
        status="EXITED",
        network_volume_id=case.resource.runpod_id,
    )
    return case_include_pod(actor=who, case=case, pod=pod).included_pods.filter(pk=pod.pk).exists()


def lift_institution_legal_hold(world, who):
    from labgov.retention.services import case_hold, hold_lift

    case = _retention_case(world)
    case_hold(
        actor=world.inst_admin, case=case, kind="legal", reason="Litigation", payer=world.allocation
    )
    case.refresh_from_db()
    return hold_lift(actor=who, case=case, note="Settled").state == "open"


def _post_as(who, url: str, data: dict) -> int:
    """The same attempt through the page, as `who` logged in: its HTTP status."""
    from django.test import Client

    web = Client()
    web.force_login(who)
    return web.post(url, data).status_code


def confirm_spending_limit(world, who):
    """Of the lab's own Runpod account, so its lab admin's refusal is a refusal of the power,
    not of a stranger's account; refused, the page refuses too and nothing is confirmed."""
    from django.urls import reverse

    from labgov.runpod.services import account_confirm_cluster_limit

    account = RunpodAccountFactory(institution=world.institution, lab=world.lab)
    try:
        done = account_confirm_cluster_limit(actor=who, account=account, confirmed=True)
    except DomainError:
        url = reverse("runpod:account_cluster_limit", args=[account.pk])
        assert _post_as(who, url, {"confirmed": "1"}) in (403, 404)
        account.refresh_from_db()
        assert account.cluster_limit_confirmed_at is None
        raise
    return done.cluster_limit_confirmed_at is not None


def _endpoint(world):
    """The member's endpoint in the lab: one always-on worker of 4, $5.00 an hour each."""
    from tests.factories import ResourceFactory
    from tests.provisioning.conftest import H100

    return ResourceFactory(
        account=RunpodAccountFactory(institution=world.institution),
        kind="serverless",
        runpod_id="ep-table",
        status="ACTIVE",
        gpu_type_id=H100,
        gpu_count=1,
        current_allocation=world.allocation,
        details={"workers_min": 1, "workers_max": 4, "idle_timeout_seconds": 5},
    )


def _runpod_accepting(account):
    """A Runpod client that would carry out the change, so only the power decides."""
    from tests.provisioning.conftest import listed_endpoint

    def update(runpod_id, *, workers_min, idle_timeout_seconds=None):
        return listed_endpoint(
            runpod_id,
            workers_min=workers_min,
            workers_max=4,
            idle_timeout_seconds=idle_timeout_seconds,
        )

    return nullcontext(SimpleNamespace(update_endpoint_workers=update))


def _second_approval_over(world, amount: str) -> None:
    from labgov.provisioning.models import ProvisioningPolicy

    ProvisioningPolicy.objects.update_or_create(
        institution=world.institution,
        lab=world.lab,
        defaults={
            "allowed_models": ["serverless"],
            "allowed_clouds": ["SECURE"],
            "second_approval_over_usd": D(amount),
        },
    )


def _workers_min(endpoint) -> int:
    endpoint.refresh_from_db()
    return endpoint.details["workers_min"]


def change_endpoint_workers(world, who):
    """Down to 0 always-on workers and a 30 s idle timeout; refused, the page (403 to those
    who see the endpoint, 404 to the rest) changes nothing either."""
    from django.urls import reverse

    from labgov.idle.endpoints import endpoint_workers_change
    from labgov.idle.models import EndpointWorkersChange

    endpoint = _endpoint(world)
    try:
        change = endpoint_workers_change(
            actor=who,
            resource=endpoint,
            workers_min=0,
            idle_timeout_seconds=30,
            client_factory=_runpod_accepting,
        )
    except (DomainError, PermissionDenied):
        url = reverse("idle:endpoint_workers", args=[endpoint.pk])
        assert _post_as(who, url, {"workers_min": "0", "idle_timeout_seconds": "30"}) in (403, 404)
        assert _workers_min(endpoint) == 1
        raise
    return change.state == EndpointWorkersChange.State.APPLIED and _workers_min(endpoint) == 0


def _raise(world, who, endpoint):
    """Ask for 3 always-on workers ($7,300 more a month) where the lab's policy needs a
    second approver above $100."""
    from labgov.idle.endpoints import endpoint_workers_change

    _second_approval_over(world, "100")
    return endpoint_workers_change(
        actor=who, resource=endpoint, workers_min=3, client_factory=_runpod_accepting
    )


def ask_for_endpoint_raise(world, who):
    from labgov.idle.models import EndpointWorkersChange

    endpoint = _endpoint(world)
    change = _raise(world, who, endpoint)
    return change.state == EndpointWorkersChange.State.PENDING and _workers_min(endpoint) == 1


def _approve_raise(world, who, change, endpoint):
    """Approve through the service; refused, the page's approve button refuses too."""
    from django.urls import reverse

    from labgov.idle.endpoints import endpoint_workers_change_approve
    from labgov.idle.models import EndpointWorkersChange

    try:
        done = endpoint_workers_change_approve(
            actor=who, change=change, client_factory=_runpod_accepting
        )
    except (DomainError, PermissionDenied):
        url = reverse("idle:endpoint_change_decide", args=[change.pk, "approve"])
        assert _post_as(who, url, {}) in (302, 403, 404)  # 302: back, with the refusal
        change.refresh_from_db()
        assert change.state == EndpointWorkersChange.State.PENDING
        assert _workers_min(endpoint) == 1
        raise
    return done.state == EndpointWorkersChange.State.APPLIED and _workers_min(endpoint) == 3


def approve_others_endpoint_raise(world, who):
    endpoint = _endpoint(world)
    asker = MembershipFactory(role="lab_admin", lab=world.lab).user
    return _approve_raise(world, who, _raise(world, asker, endpoint), endpoint)


def approve_own_endpoint_raise(world, who):
    endpoint = _endpoint(world)
    return _approve_raise(world, who, _raise(world, who, endpoint), endpoint)


POWERS = {
    "Move spend of an open month between allocations at once (cost transfer)": (transfer_at_once),
    "Propose a cost transfer between allocations of their lab": propose_transfer,
    "Approve a cost transfer proposed by someone else": approve_transfer,
    "Pay a resource from several of their labs' allocations in shares (split funding)": (
        split_resource
    ),
    "Re-assign a resource's spend already billed, from a day before today (back-dated split or "
    "move to other funding), at once": back_dated_move_at_once,
    "Propose a back-dated split or move of a resource their lab pays for": (
        propose_back_dated_move
    ),
    "Approve a back-dated split or move proposed by someone else": approve_back_dated_move,
    "Issue an invoice whose lines they changed (entered or removed a credit or adjustment, or "
    "voided the invoice it replaces)": issue_own_change,
    "Issue an invoice whose lines someone else changed": issue_others_change,
    "Void or change an invoice of a closed month (corrections go to the first open month)": (
        change_closed_month
    ),
    "Create a funding source, or set its amount, dates or status": set_funding,
    "Propose a new funding source, or a change to one of their lab's": propose_funding,
    "Approve or reject a funding proposal that is not their own": decide_proposal,
    "Import grants from CSV": import_grants,
    "Give someone else in the lab an allocation": allocate_to_other,
    "Give themselves an allocation, or change their own": allocate_to_self,
    "Set the institution's auto-approval ceiling": set_ceiling,
    "Set their lab's policy (auto-approval up to the ceiling)": set_lab_policy,
    "Add a person of the institution to a lab": add_person_of_institution,
    "Add a person of another institution to a lab": add_person_of_elsewhere,
    "Request capacity on their own allocation": request_capacity,
    "Approve a request of someone else in the lab": approve_others_request,
    "Approve by hand a request charged to their own allocation": approve_own_request_by_hand,
    "Have their own request approved on submission by their lab's auto-approval rule": (
        own_request_auto_approved
    ),
    "Stop or start a pod of theirs from its alert": act_on_own_pod,
    "Terminate a pod (deleting its disks) from its alert, alone": terminate_from_alert,
    "Read the allocations and requests of the lab's people, ended ones included": (
        read_lab_history
    ),
    "Approve deleting a volume someone else asked to delete": approve_others_deletion,
    "Approve deleting a volume they asked to delete themselves": approve_own_deletion,
    "Confirm an allocation tag on a shared Runpod account (charging the tagged resource to the "
    "allocation)": confirm_tag_claim,
    "Include a stopped pod that blocks a volume's deletion in its retention case": (
        include_blocking_pod
    ),
    "Lift a legal or audit hold an institution admin placed": lift_institution_legal_hold,
    "Confirm that Runpod raised a connected account's spending limit (so a cluster over 2 pods "
    "/ 16 GPUs on it may be approved)": confirm_spending_limit,
    "Change an endpoint's always-on workers (workers.min) or idle timeout, at once (a lowering, "
    "or a raise under the lab's second-approval amount)": change_endpoint_workers,
    "Ask for a raise of an endpoint's always-on workers above the lab's second-approval amount "
    "(it waits for a second admin)": ask_for_endpoint_raise,
    "Approve a raise of an endpoint's always-on workers someone else asked for": (
        approve_others_endpoint_raise
    ),
    "Approve a raise of an endpoint's always-on workers they asked for themselves": (
        approve_own_endpoint_raise
    ),
}


def test_the_table_and_the_powers_tested_are_the_same():
    assert {power for power, _role in TABLE} == set(POWERS)


@pytest.mark.parametrize(("power", "role"), sorted(TABLE))
def test_roles_powers_table(world, catalog, power, role):  # noqa: F811 - the catalog fixture
    who = _someone(world, role)
    try:
        done = POWERS[power](world, who)
    except (DomainError, PermissionDenied):
        done = False
    assert done == TABLE[(power, role)], f"{power} / {role}: the README says {TABLE[(power, role)]}"
