"""The FOCUS billing source pages: who may see and do what, an upload through the page, a
refusal shown in words, and a fixed number of queries as files accumulate."""

import datetime as dt
from pathlib import Path

import pytest
import time_machine
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labgov.core.periods import UTC
from labgov.runpod.focus import source_create
from labgov.runpod.models import BillingRecord, FocusFile, RunpodAccount, SyncRun

FILES = Path(__file__).parent / "focus_files"


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(dt.datetime(2026, 11, 10, 12, tzinfo=UTC), tick=False):
        yield


@pytest.fixture
def source(world):
    return source_create(
        actor=world.inst_admin, institution=world.institution, name="AWS research", provider="AWS"
    )


def _upload(name: str, **extra):
    return {"file": SimpleUploadedFile(name, (FILES / name).read_bytes(), "text/csv"), **extra}


def test_an_institution_admin_adds_a_source_and_imports_a_month_on_the_page(world, client_for):
    client = client_for(world.inst_admin)
    answer = client.post(
        reverse("runpod:focus_source_new"),
        {"name": "Azure EU", "provider": "Microsoft Azure", "currency": "EUR", "usd_per_unit": ""},
    )
    source = RunpodAccount.objects.get(name="Azure EU")
    assert answer.status_code == 302 and source.is_focus
    url = reverse("runpod:focus_source", args=[source.pk])
    # Without a rate, a EUR file is refused in words, and nothing is written.
    page = client.post(url, _upload("eur_2026_10.csv"))
    assert page.status_code == 200
    assert (
        "Row 2, column BillingCurrency: the file bills in EUR, and labgov keeps spend in USD"
        in page.content.decode()
    )
    assert not BillingRecord.objects.filter(resource__account=source).exists()
    RunpodAccount.objects.filter(pk=source.pk).update(usd_per_unit="1.08")
    answer = client.post(url, _upload("eur_2026_10.csv"), follow=True)
    assert "Imported October 2026: 6 rows" in answer.content.decode()
    assert FocusFile.objects.filter(account=source).count() == 1
    # The list names it, and the Runpod accounts page links to it, not to a sync page.
    assert "Azure EU" in client.get(reverse("runpod:focus_sources")).content.decode()
    accounts = client.get(reverse("runpod:account_list")).content.decode()
    assert url in accounts and "FOCUS files (Microsoft Azure)" in accounts
    assert client.get(reverse("runpod:account_detail", args=[source.pk])).url == url


def test_who_may_see_and_import(world, client_for, source):
    url = reverse("runpod:focus_source", args=[source.pk])
    assert client_for(world.member).get(reverse("runpod:focus_sources")).status_code == 403
    assert client_for(world.member).get(url).status_code == 404
    assert client_for(world.outsider).get(url).status_code == 404
    assert (
        client_for(world.lab_admin).post(reverse("runpod:focus_source_new"), {}).status_code == 403
    )
    finance = client_for(world.finance)
    assert finance.get(url).status_code == 200
    assert "Import a month" not in finance.get(url).content.decode()
    assert finance.post(url, _upload("aws_2026_10.csv")).status_code == 403
    assert not FocusFile.objects.exists()


def test_the_source_page_keeps_its_query_count_as_files_accumulate(world, client_for, source):
    client = client_for(world.finance)
    url = reverse("runpod:focus_source", args=[source.pk])

    def count():
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    def files(n):
        for i in range(n):
            FocusFile.objects.create(
                account=source,
                run=SyncRun.objects.create(account=source, trigger="import", status="succeeded"),
                sha256=f"{i:064d}",
                period_start=dt.datetime(2026, 10, 1, tzinfo=UTC),
                period_end=dt.datetime(2026, 11, 1, tzinfo=UTC),
                currency="USD",
                billed_total=1,
                total_usd=1,
                imported_by=world.inst_admin,
            )

    files(1)
    few = count()
    files(12)
    assert count() == few
