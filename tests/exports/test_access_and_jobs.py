"""Who may export what; background jobs from request to expiry; a file downloaded by anyone
but its requester (in scope) is a 404 — the attacks are performed."""

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.urls import reverse

from labgov.accounts.models import Membership
from labgov.exports.models import ExportJob
from labgov.exports.services import export_job_run, export_jobs_expire, job_path
from labgov.runpod.models import BillingRecord
from tests.exports.conftest import make_invoice
from tests.factories import FundingSourceFactory, ResourceFactory, RunpodAccountFactory

PERIOD = "exports:period"
NOW = dt.datetime(2026, 11, 3, 9, tzinfo=dt.UTC)


def _args(world):
    return [world.institution.pk, 2026, 10]


@pytest.mark.parametrize(
    ("who", "period", "vision", "nlp", "journal"),
    [
        ("finance", 200, 200, 200, 200),
        ("inst_admin", 200, 200, 200, 200),
        ("lab_admin", 200, 200, 404, 403),
        ("member", 404, 404, 404, 404),
        ("outsider", 404, 404, 404, 404),
    ],
)
def test_who_may_export(
    invoices, world, client_for, monkeypatch, who, period, vision, nlp, journal
):
    # Access is the question here; the PDF's content is test_formats'.
    monkeypatch.setattr("labgov.exports.pdf.write_pdf", lambda out, exports: out.write(b"%PDF"))
    client = client_for(getattr(world, who))
    assert client.get(reverse(PERIOD, args=_args(world))).status_code == period
    assert client.get(reverse("exports:period_lines_csv", args=_args(world))).status_code == (
        period
    )
    for name in ("invoice_csv", "invoice_xlsx", "invoice_pdf"):
        assert client.get(reverse(f"exports:{name}", args=[invoices.vision.pk])).status_code == (
            vision
        )
        assert client.get(reverse(f"exports:{name}", args=[invoices.nlp.pk])).status_code == nlp
    assert client.get(reverse("exports:period_journal_csv", args=_args(world))).status_code == (
        journal
    )


def test_a_lab_admin_exports_only_their_labs_lines(invoices, world, client_for):
    client = client_for(world.lab_admin)
    response = client.get(reverse("exports:period_lines_csv", args=_args(world)))
    text = b"".join(response.streaming_content).decode()
    assert world.funding_source.name in text and world.other_funding_source.name not in text
    page = client.get(reverse(PERIOD, args=_args(world))).content.decode()
    assert "2026-0001" in page and f"draft #{invoices.nlp.pk}" not in page


def test_anonymous_is_sent_to_log_in_and_mutations_are_post_only(invoices, world, client_for):
    client = client_for(None)
    assert client.get(reverse(PERIOD, args=_args(world))).status_code == 302
    assert client.get(reverse("exports:invoice_pdf", args=[invoices.vision.pk])).status_code == 302
    client = client_for(world.finance)
    assert client.get(reverse("exports:job_create", args=_args(world))).status_code == 405
    assert client.get(reverse(PERIOD, args=[world.institution.pk, 2026, 13])).status_code == 404


@time_machine.travel(NOW, tick=False)
def test_a_job_runs_once_with_progress_and_only_its_requester_downloads_it(
    invoices, world, client_for, django_capture_on_commit_callbacks
):
    client = client_for(world.finance)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("exports:job_create", args=_args(world)), {"kind": "period_xlsx"}
        )
    job = ExportJob.objects.get()
    assert response.url == reverse("exports:job", args=[job.pk])
    assert (job.status, job.progress_done, job.progress_total) == ("done", 5, 5)
    assert job.expires_at == NOW + dt.timedelta(days=settings.LABGOV_EXPORT_KEEP_DAYS)
    assert job_path(job).parent == settings.LABGOV_EXPORT_DIR
    page = client.get(reverse("exports:job", args=[job.pk]), headers={"HX-Request": "true"})
    assert b"hx-trigger" not in page.content and b"export-download" in page.content
    download = client.get(reverse("exports:job_download", args=[job.pk]))
    assert download.status_code == 200
    assert download["Content-Disposition"].endswith('-2026-10-invoices.xlsx"')
    assert b"".join(download.streaming_content)[:2] == b"PK"

    export_job_run(job.pk)  # a second delivery of the task writes nothing
    assert ExportJob.objects.get().file_name == job.file_name

    # The attack: everyone else, however senior, guesses the job's address.
    for other in (world.inst_admin, world.lab_admin, world.member, world.outsider):
        client = client_for(other)
        assert client.get(reverse("exports:job_download", args=[job.pk])).status_code == 404
        assert client.get(reverse("exports:job", args=[job.pk])).status_code == 404
    # The requester who leaves finance loses the file too.
    Membership.objects.filter(user=world.finance).update(end_date=dt.date(2026, 11, 1))
    client = client_for(world.finance)
    assert client.get(reverse("exports:job_download", args=[job.pk])).status_code == 404


def test_a_lab_admins_job_holds_only_their_labs(invoices, world, client_for, tmp_path):
    from django.db import transaction

    from labgov.exports.services import export_job_request

    with transaction.atomic():
        job = export_job_request(
            actor=world.lab_admin,
            institution=world.institution,
            month=invoices.vision.month,
            kind="period_csv",
        )
    export_job_run(job.pk)
    job.refresh_from_db()
    text = job_path(job).read_text()
    assert world.funding_source.name in text and world.other_funding_source.name not in text
    assert job.progress_total == 4


def test_a_waiting_job_polls_its_progress(invoices, world, client_for):
    job = ExportJob.objects.create(
        institution=world.institution,
        requested_by=world.finance,
        kind="period_pdf",
        month=dt.date(2026, 10, 1),
        status="running",
        progress_done=3,
        progress_total=12,
        download_name="x.pdf",
    )
    client = client_for(world.finance)
    page = client.get(reverse("exports:job", args=[job.pk]), headers={"HX-Request": "true"})
    html = page.content.decode()
    assert 'hx-trigger="every 1s"' in html and 'value="25"' in html and "3 of 12 rows" in html
    assert client.get(reverse("exports:job_download", args=[job.pk])).status_code == 404


def test_files_expire_on_schedule(invoices, world, client_for, django_capture_on_commit_callbacks):
    assert settings.CELERY_BEAT_SCHEDULE["exports-expire"]["task"] == (
        "labgov.exports.tasks.expire_exports"
    )
    client = client_for(world.finance)
    with time_machine.travel(NOW, tick=False):
        with django_capture_on_commit_callbacks(execute=True):
            client.post(reverse("exports:job_create", args=_args(world)), {"kind": "period_pdf"})
        job = ExportJob.objects.get()
        path = job_path(job)
        assert path.read_bytes().startswith(b"%PDF")
        assert export_jobs_expire() == 0
    days = settings.LABGOV_EXPORT_KEEP_DAYS
    with time_machine.travel(NOW + dt.timedelta(days=days, seconds=1), tick=False):
        assert export_jobs_expire() == 1
    assert not path.exists()
    assert ExportJob.objects.get().status == "expired"
    assert client.get(reverse("exports:job_download", args=[job.pk])).status_code == 404


def test_billing_records_export_is_scoped_and_large_ones_go_to_a_job(
    invoices, world, client_for, settings
):
    account = RunpodAccountFactory(institution=world.institution)
    resource = ResourceFactory(account=account, name="=cmd|' /C calc'!A0")
    hour = dt.datetime(2026, 10, 31, 23, tzinfo=dt.UTC)
    BillingRecord.objects.bulk_create(
        BillingRecord(
            resource=resource,
            kind="pod",
            bucket_start=hour - dt.timedelta(hours=h),
            bucket_end=hour - dt.timedelta(hours=h - 1),
            total_usd=Decimal("1.0000001"),
            gpu_usd=Decimal("1.0000001"),
            allocation=world.allocation if h else None,
        )
        for h in range(3)
    )
    args = _args(world)
    finance = client_for(world.finance).get(reverse("exports:period_records_csv", args=args))
    text = b"".join(finance.streaming_content).decode()
    assert text.count("1.0000001000") == 6 and "'=cmd" in text and "2026-10-31 23:00" in text
    lab_admin = client_for(world.lab_admin).get(reverse("exports:period_records_csv", args=args))
    assert b"".join(lab_admin.streaming_content).decode().count("\n") == 3  # header + 2 own
    settings.LABGOV_EXPORT_SYNC_MAX_ROWS = 2
    response = client_for(world.finance).get(reverse("exports:period_records_csv", args=args))
    assert response.status_code == 302 and response.url == reverse(PERIOD, args=args)


def test_members_export_their_share_of_issued_invoices_only(invoices, world, client_for):
    september = dt.date(2026, 9, 1)
    line = ("gpu_compute", "pod mine", None, None, "4.125", True)
    make_invoice(world.funding_source, lines=[line], month=september, allocation=world.allocation)
    make_invoice(
        world.other_funding_source,
        lines=[line],
        month=september,
        status="issued",
        number_seq=7,
        allocation=world.allocation,
    )

    def share(user):
        response = client_for(user).get(reverse("exports:my_share_csv"))
        return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))

    rows = share(world.member)  # the draft's line is not theirs to see yet
    assert [(r["invoice"], r["amount_usd"]) for r in rows] == [("2026-0007", "4.12")]
    assert share(world.other_member) == [] and share(world.lab_admin) == []
    assert client_for(None).get(reverse("exports:my_share_csv")).status_code == 302


def test_a_records_csv_job_writes_what_the_download_streams(
    invoices, world, client_for, django_capture_on_commit_callbacks, monkeypatch
):
    """Progress is reported while COPY holds the job's connection (through another one: on
    the same connection the update would wait for the COPY, which waits for it)."""
    from labgov.exports import services

    reported = []
    side_reporter = services._progress_on

    def counting(side, job_id):
        report = side_reporter(side, job_id)
        return lambda done: (reported.append(done), report(done))

    monkeypatch.setattr(services, "PROGRESS_STEP", 1)
    monkeypatch.setattr(services, "_progress_on", counting)
    account = RunpodAccountFactory(institution=world.institution)
    resource = ResourceFactory(account=account, name='=HYPERLINK("x")')
    hour = dt.datetime(2026, 10, 2, tzinfo=dt.UTC)
    BillingRecord.objects.create(
        resource=resource,
        kind="pod",
        bucket_start=hour,
        bucket_end=hour + dt.timedelta(hours=1),
        total_usd=Decimal("-0.25"),
        fee_usd=Decimal("-0.25"),
        allocation=world.allocation,
    )
    client = client_for(world.finance)
    streamed = b"".join(
        client.get(reverse("exports:period_records_csv", args=_args(world))).streaming_content
    )
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("exports:job_create", args=_args(world)), {"kind": "records_csv"})
    job = ExportJob.objects.get()
    assert (job.status, job.progress_done, job.progress_total) == ("done", 1, 1)
    if connection.vendor == "postgresql":
        assert reported and reported[-1] == 1
    assert job_path(job).read_bytes() == streamed
    rows = list(csv.DictReader(io.StringIO(streamed.decode())))
    assert rows[0]["resource_name"] == "'" + '=HYPERLINK("x")'
    assert rows[0]["total_usd"] == "-0.2500000000"  # a number: left alone


def test_the_period_page_reads_a_fixed_number_of_queries(
    invoices, world, client_for, django_assert_num_queries, django_assert_max_num_queries
):
    client = client_for(world.finance)
    url = reverse(PERIOD, args=_args(world))
    client.get(url)  # the session's first reads
    # 9: which lines of the provisional invoices are reconciled now is worked out (their
    # lines, their resources' first and last records, the month's reconciliation) at once.
    with django_assert_max_num_queries(9) as first:
        assert client.get(url).status_code == 200
    for reconciled in (True, False, True, False):  # more invoices cost no more queries
        make_invoice(
            FundingSourceFactory(lab=world.other_lab),
            lines=[("gpu_compute", "y", None, None, "2", reconciled)] * 2,
        )
    with django_assert_num_queries(len(first.captured_queries)):
        assert client.get(url).status_code == 200
