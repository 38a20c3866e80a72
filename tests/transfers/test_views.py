from decimal import Decimal

from django.urls import reverse

from labgov.runpod.models import AssignmentShare
from labgov.transfers.models import CostTransfer
from labgov.transfers.services import cost_transfer_create
from tests.transfers.conftest import NOV


def _form(world, account, target, **overrides):
    data = {
        "from_allocation": world.allocation.pk,
        "to_allocation": target.pk,
        "account": account.pk,
        "month": "2026-11",
        "resource_runpod_id": "",
        "amount_usd": "12.25",
        "justification": "Charged to the wrong grant",
    }
    data.update(overrides)
    return data


def test_finance_moves_spend_from_the_form_and_sees_it_listed(world, spent, client_for):
    account, pod, second, other = spent
    client = client_for(world.finance)
    response = client.post(
        reverse("transfers:new"), _form(world, account, other, resource_runpod_id=pod.runpod_id)
    )
    assert response.status_code == 302
    transfer = CostTransfer.objects.get()
    assert transfer.state == CostTransfer.State.APPLIED and transfer.resource == pod
    page = client.get(reverse("transfers:list"), {"lab": world.other_lab.pk}).content.decode()
    assert f'id="transfer-{transfer.pk}"' in page and "$12.25" in page


def test_the_transfer_form_shows_every_problem_at_once(world, spent, client_for):
    account, pod, second, other = spent
    response = client_for(world.lab_admin).post(
        reverse("transfers:new"),
        _form(world, account, second, amount_usd="99", resource_runpod_id="nope"),
    )
    assert response.status_code == 200
    assert "No resource with this id" in response.content.decode()
    response = client_for(world.lab_admin).post(
        reverse("transfers:new"), _form(world, account, second, amount_usd="99", justification=" ")
    )
    page = response.content.decode()
    assert "This field is required." in page  # the justification, from the form
    response = client_for(world.lab_admin).post(
        reverse("transfers:new"), _form(world, account, world.allocation, amount_usd="99")
    )
    page = response.content.decode()
    assert "Choose another allocation" in page
    assert not CostTransfer.objects.exists()


def test_a_lab_admin_cannot_pick_another_labs_allocation(world, spent, client_for):
    """The cross-lab attack through the page: the other lab's allocation is not a choice."""
    account, pod, second, other = spent
    response = client_for(world.lab_admin).post(
        reverse("transfers:new"), _form(world, account, other)
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not CostTransfer.objects.exists()


def test_list_queries_do_not_grow_with_transfers(
    world, spent, client_for, django_assert_num_queries
):
    account, pod, second, other = spent
    for _ in range(3):
        cost_transfer_create(
            actor=world.finance,
            account=account,
            from_allocation=world.allocation,
            to_allocation=second,
            month=NOV,
            amount_usd=Decimal(1),
            justification="x",
            resource=pod,
        )
    client = client_for(world.finance)
    # One more for the back-dated moves waiting (none here; test_moves.py pins them).
    with django_assert_num_queries(7):
        assert client.get(reverse("transfers:list")).status_code == 200


def test_shares_editor_saves_a_split_and_shows_every_error_at_once(world, spent, client_for):
    account, pod, second, other = spent
    url = reverse("transfers:resource_funding", args=[pod.pk])
    client = client_for(world.lab_admin)
    bad = {
        "starts_on": "2026-11-03",
        "allocation_1": world.allocation.pk,
        "share_1": "60",
        "allocation_2": second.pk,
        "share_2": "",
        "share_3": "10",
    }
    page = client.post(url, bad).content.decode()
    assert "Give this allocation&#x27;s share." in page
    assert "Choose the allocation for this share." in page
    assert "add up to 60%, not exactly 100%" in page
    # From today on: the lab admin's own (a back-dated one waits, tests/transfers/test_moves.py).
    good = {
        "starts_on": "2026-11-20",
        "allocation_1": world.allocation.pk,
        "share_1": "60",
        "allocation_2": second.pk,
        "share_2": "40",
    }
    assert client.post(url, good).status_code == 302
    assert AssignmentShare.objects.filter(assignment__resource=pod).count() == 2
    page = client.get(url).content.decode()
    assert "60.00% " in page and "40.00% " in page
    # Before the current assignment: refused beside the date.
    page = client.post(url, {**good, "starts_on": "2026-11-19"}).content.decode()
    assert "cannot start before the current assignment" in page


def test_dashboards_show_the_move_on_both_sides(world, spent, client_for):
    account, pod, second, other = spent
    cost_transfer_create(
        actor=world.finance,
        account=account,
        from_allocation=world.allocation,
        to_allocation=other,
        month=NOV,
        amount_usd=Decimal("7.5"),
        justification="Wrong grant",
    )
    client = client_for(world.finance)
    params = {"start": "2026-11-01", "end": "2026-11-20"}
    for fs, amount in ((world.funding_source, "−$7.50"), (world.other_funding_source, "$7.50")):
        response = client.get(reverse("dashboard:funding", args=[fs.pk]), params)
        assert response.status_code == 200
        page = response.content.decode()
        assert "Cost transfers" in page and amount in page
    page = client.get(reverse("dashboard:lab", args=[world.other_lab.pk]), params)
    assert "Cost transfers" in page.content.decode()


def test_the_timeline_of_a_resource_assigned_from_the_beginning_does_not_say_1970(
    world, client_for
):
    from labgov.runpod.attribution import BEGINNING
    from labgov.runpod.models import Assignment
    from tests.factories import ResourceFactory, RunpodAccountFactory

    pod = ResourceFactory(account=RunpodAccountFactory(institution=world.institution))
    Assignment.objects.create(
        resource=pod, allocation=world.allocation, starts_at=BEGINNING, source="rule"
    )
    html = (
        client_for(world.lab_admin)
        .get(reverse("transfers:resource_funding", args=[pod.pk]))
        .content.decode()
    )
    assert "1970" not in html
    assert "since labgov&#x27;s first record" in html or "since labgov's first record" in html
