from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from labgov.funding.models import Allocation, FundingProposal, FundingSource

HEADER = b"lab,name,award_number,start_date,end_date,amount_usd\n"
GOOD_CSV = HEADER + b"vision,X,A-1,2026-01-01,2026-12-31,5\n"
BAD_CSV = HEADER + b"vision,X,A-1,2026-02-01,2026-01-01,5\n"


def _fs_data(world, **overrides):
    data = {
        "lab": world.lab.pk,
        "kind": "grant",
        "name": "Form grant",
        "award_number": "F-1",
        "start_date": "2026-01-01",
        "end_date": "2026-12-31",
        "amount_usd": "100.00",
        "status": "active",
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"end_date": "2025-01-01"}, "The end date is before the start date."),
        ({"amount_usd": "-3"}, "The amount cannot be negative."),
        ({"amount_usd": "three"}, "Enter a number."),
        ({"start_date": "31/12/2026"}, "Enter a valid date."),
        ({"name": ""}, "This field is required."),
    ],
)
def test_funding_form_shows_field_errors_and_keeps_input(world, client_for, overrides, message):
    response = client_for(world.finance).post(
        reverse("funding:create"), _fs_data(world, **overrides)
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert message in page
    assert 'value="F-1"' in page  # nothing the person typed is lost
    assert not FundingSource.objects.filter(award_number="F-1").exists()


def test_lab_admin_cannot_propose_for_a_lab_they_do_not_run(world, client_for):
    response = client_for(world.lab_admin).post(
        reverse("funding:proposal_new"), _fs_data(world, lab=world.other_lab.pk)
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not FundingProposal.objects.exists()


def test_create_redirects_to_the_new_funding_source(world, client_for):
    response = client_for(world.finance).post(reverse("funding:create"), _fs_data(world))
    fs = FundingSource.objects.get(award_number="F-1")
    assert response.url == reverse("funding:detail", args=[fs.pk])


def test_edit_shows_allocation_conflict_on_the_amount(world, client_for):
    fs = world.funding_source
    response = client_for(world.finance).post(
        reverse("funding:edit", args=[fs.pk]),
        _fs_data(
            world,
            award_number=fs.award_number,
            start_date=fs.start_date,
            end_date=fs.end_date,
            amount_usd="10",
        ),
    )
    assert response.status_code == 200
    assert "already allocated" in response.content.decode()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cap_usd": "999999"}, "more than the funding source"),
        ({"start_date": "2000-01-01"}, "must lie within the funding period"),
        ({"cap_usd": "-1"}, "cannot be negative"),
        ({"cap_usd": "abc"}, "Enter a number."),
    ],
)
def test_allocation_form_errors(world, client_for, overrides, message):
    fs = world.funding_source
    data = {
        "project_name": "P",
        "cap_usd": "10",
        "start_date": fs.start_date,
        "end_date": fs.end_date,
    }
    data.update(overrides)
    response = client_for(world.lab_admin).post(
        reverse("funding:allocation_new", args=[fs.pk]), data
    )
    assert response.status_code == 200
    assert message in response.content.decode()
    assert Allocation.objects.filter(funding_source=fs).count() == 1


def test_allocation_person_choices_are_lab_members_only(world, client_for):
    response = client_for(world.lab_admin).get(
        reverse("funding:allocation_new", args=[world.funding_source.pk])
    )
    page = response.content.decode()
    assert f'value="{world.member.pk}"' in page
    assert f'value="{world.other_member.pk}"' not in page


def test_funding_list_htmx_returns_only_the_table(world, client_for):
    client = client_for(world.finance)
    response = client.get(
        reverse("funding:list"),
        {"q": world.funding_source.award_number},
        headers={"HX-Request": "true"},
    )
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="funding-table">')
    assert world.funding_source.name in page
    assert world.other_funding_source.name not in page
    full = client.get(reverse("funding:list")).content.decode()
    assert "<html" in full and world.other_funding_source.name in full


def test_funding_list_sorting(world, client_for):
    world.other_funding_source.amount_usd = Decimal("99999.00")
    world.other_funding_source.save()
    page = (
        client_for(world.finance).get(reverse("funding:list"), {"sort": "-amount"}).content.decode()
    )
    assert page.index(world.other_funding_source.name) < page.index(world.funding_source.name)


def test_member_funding_list_shows_only_their_allocations(world, client_for):
    page = client_for(world.member).get(reverse("funding:list")).content.decode()
    # Their allocation names its funding source, which they cannot open; no source table.
    assert "My allocations" in page and world.funding_source.name in page
    assert reverse("funding:detail", args=[world.funding_source.pk]) not in page
    assert world.other_funding_source.name not in page
    assert 'id="funding-table"' not in page


def test_import_view_reports_bad_rows(world, client_for):
    csv = BAD_CSV
    response = client_for(world.finance).post(
        reverse("funding:import"),
        {"institution": world.institution.pk, "file": SimpleUploadedFile("g.csv", csv, "text/csv")},
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "Nothing was imported" in page
    assert "line 2: The end date is before the start date." in page


def test_import_view_imports_good_file(world, client_for):
    csv = GOOD_CSV
    response = client_for(world.finance).post(
        reverse("funding:import"),
        {"institution": world.institution.pk, "file": SimpleUploadedFile("g.csv", csv, "text/csv")},
    )
    assert response.status_code == 302
    assert FundingSource.objects.filter(award_number="A-1", institution=world.institution).exists()


def test_import_into_another_institution_is_refused(world, client_for):
    csv = GOOD_CSV
    response = client_for(world.outsider).post(
        reverse("funding:import"),
        {"institution": world.institution.pk, "file": SimpleUploadedFile("g.csv", csv, "text/csv")},
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not FundingSource.objects.filter(award_number="A-1").exists()


def test_allocation_tags_are_shown_to_the_holder_and_lab_admins_only(world, client_for):
    """The tag that makes a pod bill an allocation is for who may spend it."""
    nlp = Allocation.objects.create(
        funding_source=world.other_funding_source,
        project_name="NLP evals",
        cap_usd=10,
        start_date=world.other_funding_source.start_date,
        end_date=world.other_funding_source.end_date,
    )
    url = reverse("funding:detail", args=[world.funding_source.pk])
    for user in (world.lab_admin, world.inst_admin):
        assert world.allocation.tag_code in client_for(user).get(url).content.decode()
    assert world.allocation.tag_code not in client_for(world.finance).get(url).content.decode()
    other_url = reverse("funding:detail", args=[world.other_funding_source.pk])
    assert nlp.tag_code not in client_for(world.finance).get(other_url).content.decode()
    mine = client_for(world.member).get(reverse("dashboard:me")).content.decode()
    assert f"LABGOV_ALLOCATION={world.allocation.tag_code}" in mine
    assert nlp.tag_code not in mine
