import datetime as dt

import pytest
import time_machine
from django.conf import settings
from django.core.management import call_command

from labgov.invoicing.models import Invoice
from labgov.invoicing.services import drafts_generate_due
from labgov.notifications.models import Notification
from tests.invoicing.conftest import at, bill

pytestmark = pytest.mark.django_db


def test_the_beat_schedule_checks_hourly_for_the_first_of_the_month():
    entry = settings.CELERY_BEAT_SCHEDULE["invoicing-drafts"]
    assert entry["task"] == "labgov.invoicing.tasks.generate_due_drafts"


def test_on_the_first_the_previous_months_drafts_are_generated_once_and_finance_told(world, pod):
    bill(pod, at(2026, 10, 20, 3), allocation=world.allocation, gpu="2")
    too_early = at(2026, 11, 1, settings.LABGOV_INVOICE_DRAFTS_HOUR - 1)
    assert drafts_generate_due(now=too_early) == []
    due = at(2026, 11, 1, settings.LABGOV_INVOICE_DRAFTS_HOUR, 30)
    assert drafts_generate_due(now=due) == [(world.institution.pk, dt.date(2026, 10, 1))]
    invoice = Invoice.objects.get()
    assert invoice.status == "draft" and invoice.month == dt.date(2026, 10, 1)
    note = Notification.objects.get(kind="invoicing.drafts_ready")
    assert note.recipient == world.finance and "October 2026" in note.subject
    assert note.url == f"/invoices/{world.institution.pk}/2026/10/"
    # Later hours of the same day (or a second scheduler) do nothing more.
    assert drafts_generate_due(now=due + dt.timedelta(hours=1)) == []
    assert Notification.objects.filter(kind="invoicing.drafts_ready").count() == 1
    assert drafts_generate_due(now=at(2026, 11, 2, 12)) == []


def test_each_institution_waits_for_its_own_first_of_the_month(world, pod):
    world.institution.time_zone = "America/Los_Angeles"
    world.institution.save()
    bill(pod, at(2026, 10, 20, 3), allocation=world.allocation, gpu="2")
    # 06:30 UTC on 1 November is still 31 October in Los Angeles.
    assert drafts_generate_due(now=at(2026, 11, 1, 6, 30)) == []
    hour = settings.LABGOV_INVOICE_DRAFTS_HOUR + 8  # PST
    assert len(drafts_generate_due(now=at(2026, 11, 1, hour, 30))) == 1


def test_the_command_regenerates_a_month(world, pod, capsys):
    bill(pod, at(2026, 10, 20, 3), allocation=world.allocation, gpu="2")
    with time_machine.travel(at(2026, 11, 5), tick=False):
        call_command("generate_invoices", month="2026-10", institution=world.institution.slug)
    assert "1 draft(s) for 2026-10" in capsys.readouterr().out
    assert Invoice.objects.get().total_usd == 2
