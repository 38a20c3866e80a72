"""The personal dashboard: my allocations, my resources, my share of the lab's spend."""

import csv
import datetime as dt
import io
from decimal import Decimal

from django.urls import reverse

from labgov.accounts.models import Role
from tests.dashboard.conftest import TODAY, add_spend, count_queries, grow, past_rate_only
from tests.factories import AllocationFactory, MembershipFactory, ResourceFactory

D = Decimal


def _url(**params):
    from urllib.parse import urlencode

    url = reverse("dashboard:me")
    return f"{url}?{urlencode(params)}" if params else url


def _classmate_spends(world, spend):
    classmate = MembershipFactory(role=Role.MEMBER, lab=world.lab).user
    allocation = AllocationFactory(funding_source=world.funding_source, user=classmate)
    for d in (1, 2, 3):
        add_spend(spend.account, TODAY - dt.timedelta(days=d), "5.00", allocation=allocation)
    ResourceFactory(account=spend.account, status="RUNNING", current_allocation=allocation)
    return classmate


def test_my_allocations_with_forecast(world, spend, client_for):
    past_rate_only(spend)
    data = client_for(world.member).get(_url()).context["data"]
    [row] = data.tables["allocations"].rows
    assert row.cells[0] == world.funding_source.name and row.cells[1] == world.lab.name
    assert row.cells[4:8] == [D("1000"), D("110"), D("890"), D("11")]
    assert row.cells[8] == TODAY + dt.timedelta(days=80)
    assert data.totals["remaining"] == D("890") and data.totals["burn"] == D("11")


def test_my_resources_with_status_rate_and_storage(world, spend, client_for):
    _classmate_spends(world, spend)
    data = client_for(world.member).get(_url()).context["data"]
    rows = {r.cells[0]: r.cells for r in data.tables["resources"].rows}
    assert set(rows) == {"train-a100", "forgotten", "old-checkpoints", "datasets"}
    assert rows["train-a100"][2] == "RUNNING" and rows["train-a100"][5] == D("1.89")
    assert rows["forgotten"][2] == "EXITED" and rows["forgotten"][5] == 0
    assert rows["forgotten"][6] == D("40.00")  # 200 GB of stopped volume disk at $0.20
    assert rows["train-a100"][6] == D("7.00")  # 70 GB of running disk at $0.10
    assert data.totals["rate"] == D("1.89")
    assert data.totals["storage"] == D("89.00")


def test_my_share_of_the_labs_spend(world, spend, client_for):
    _classmate_spends(world, spend)
    data = (
        client_for(world.member)
        .get(_url(start=(TODAY - dt.timedelta(days=2)).isoformat()))
        .context["data"]
    )
    assert [r.cells for r in data.tables["share"].rows] == [
        [TODAY - dt.timedelta(days=2), D("11"), D("5"), D("11") * 100 / 16],
        [TODAY - dt.timedelta(days=1), D("11"), D("5"), D("11") * 100 / 16],
    ]
    assert data.totals["mine"] == D("22") and data.totals["lab"] == D("32")
    mine, rest = data.share_chart["datasets"]
    assert mine["data"] == [D("11.00"), D("11.00"), D("0.00")]
    assert rest["data"] == [D("5.00"), D("5.00"), D("0.00")]


def test_a_day_the_lab_nets_to_zero_leaves_the_others_my_negative(world, spend, client_for):
    """My $7 and a classmate's $7 credit on one day: the lab spent nothing that day (its
    rollups by lab hold no row for it), so the others' part is -$7 and the lab's total $0."""
    classmate = AllocationFactory(funding_source=world.funding_source)
    day = TODAY - dt.timedelta(days=20)  # before the spend fixture's ten days
    add_spend(spend.account, day, "7.00", allocation=world.allocation, category="cpu_compute")
    add_spend(spend.account, day, "-7.00", allocation=classmate, category="cpu_compute")
    data = (
        client_for(world.member)
        .get(_url(start=day.isoformat(), end=day.isoformat()))
        .context["data"]
    )
    assert [r.cells[:3] for r in data.tables["share"].rows] == [[day, D("7"), D("-7")]]
    assert data.totals["mine"] == D("7") and data.totals["lab"] == D("0")


def test_another_labs_spend_is_not_shown_by_asking_for_it(world, spend, client_for):
    """?lab= naming a lab the person is not in shows their own lab's share, never the other
    lab's totals by day."""
    _classmate_spends(world, spend)
    stranger = AllocationFactory(funding_source=world.other_funding_source)
    for d in (1, 2):
        add_spend(spend.account, TODAY - dt.timedelta(days=d), "777.00", allocation=stranger)
    other_lab = world.other_funding_source.lab_id
    start = (TODAY - dt.timedelta(days=2)).isoformat()
    data = client_for(world.member).get(_url(lab=other_lab, start=start)).context["data"]
    assert data.lab_id == world.lab.pk != other_lab
    assert data.totals["lab"] == D("32")  # the member's 22 and the classmate's 10, as above
    assert all(D("777") not in r.cells for r in data.tables["share"].rows)


def test_only_totals_of_the_others_are_shown(world, spend, client_for):
    classmate = _classmate_spends(world, spend)
    page = client_for(world.member).get(_url()).content.decode()
    assert str(classmate) not in page


def test_csv_of_my_resources(world, spend, client_for):
    response = client_for(world.member).get(_url(format="csv", table="resources"))
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [
        "Resource",
        "Kind",
        "Status",
        "Paid from",
        "Volume GB",
        "$/hour now",
        "Storage $/month",
    ]
    assert rows[1][0] == "train-a100" and rows[1][5] == "1.89"  # sorted by $/hour, highest first
    assert rows[-1] == ["Total", "", "", "", "", "1.89", "89.00"]


def test_someone_without_allocations_sees_an_empty_page(world, client_for):
    response = client_for(world.other_member).get(_url())
    assert response.status_code == 200
    assert "You have no allocations yet" in response.content.decode()


def test_query_count_is_pinned_and_independent_of_data_size(world, spend, client_for):
    client = client_for(world.member)
    small, _ = count_queries(client, _url())
    grow(world, spend, 10)
    large, response = count_queries(client, _url())
    # session, user, scope; my allocations with figures; the burn window per allocation; my
    # resources (my pods to stop and start among them); the lab's spend per day (its rollups by
    # lab) and mine (my rollups).
    assert small == large == 8
    assert len(response.context["data"].tables["allocations"].rows) == 11


def test_my_pods_say_what_each_state_bills(world, spend, client_for):
    """Running per hour, stopped per month for its volume disk, starting per hour once it
    runs (never "$0.00 per month"), and an errored pod no compute."""
    states = {
        "pod-running": ("RUNNING", D("1.89")),
        "pod-stopped": ("EXITED", D("1.89")),
        "pod-starting": ("STARTING", D("2.49")),
        "pod-provisioning": ("PROVISIONING", D(0)),
        "pod-error": ("ERROR", D("1.89")),
    }
    pods = {
        name: ResourceFactory(
            account=spend.account,
            name=name,
            status=status,
            cost_per_hr_usd=rate,
            volume_disk_gb=50,
            current_allocation=world.allocation,
        )
        for name, (status, rate) in states.items()
    }
    page = client_for(world.member).get(_url()).content.decode()

    def cost(name):
        row = page.split(f'id="pod-{pods[name].pk}"')[1].split("</tr>")[0]
        return row.split('data-figure="pod-cost">')[1].split("</td>")[0]

    assert cost("pod-running") == "$1.89 per hour"
    assert cost("pod-stopped") == "$10.00 per month"  # 50 GB at $0.20 while stopped
    assert cost("pod-starting") == "$2.49 per hour once running"
    assert cost("pod-provisioning") == "Per hour once running"
    assert cost("pod-error") == "No compute billed"
    assert "$0.00 per month" not in page
