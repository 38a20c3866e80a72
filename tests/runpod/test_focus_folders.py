"""A FOCUS source's folder: an institution admin names one under LABGOV_FOCUS_DROP_ROOT (never
outside it, however the path is written), and the worker imports each new file found there
once, by its SHA-256, keeping what became of it (imported, unchanged, refused in the import's
words) where the source's page shows its files."""

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest
import time_machine
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.core.periods import UTC
from labgov.runpod import focus, focus_folders
from labgov.runpod.focus import focus_import, source_create
from labgov.runpod.focus_folders import folders_import, source_folder_set
from labgov.runpod.models import BillingRecord, FocusDrop, FocusFile
from labgov.runpod.tasks import focus_folders_import

FILES = Path(__file__).parent / "focus_files"
NOW = dt.datetime(2026, 11, 10, 12, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def root(tmp_path, settings, world):
    """The institution's own folder under LABGOV_FOCUS_DROP_ROOT (where its sources' folders
    lie)."""
    top = tmp_path / "drops"
    folder = top / world.institution.slug
    folder.mkdir(parents=True)
    settings.LABGOV_FOCUS_DROP_ROOT = str(top)
    settings.LABGOV_FOCUS_SETTLE_SECONDS = 60
    return folder


@pytest.fixture
def source(world):
    return source_create(
        actor=world.inst_admin, institution=world.institution, name="AWS research", provider="AWS"
    )


def _drop(folder: Path, name: str, as_name: str | None = None, age_s: int = 3600) -> Path:
    """Put a test file into the folder, last changed `age_s` seconds before the test's now."""
    target = folder / (as_name or name)
    shutil.copyfile(FILES / name, target)
    moment = (NOW - dt.timedelta(seconds=age_s)).timestamp()
    os.utime(target, (moment, moment))
    return target


def test_a_folder_lies_under_the_root_however_it_is_written(world, source, root, tmp_path):
    (root / "aws").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    attacks = [
        "../outside",
        "aws/../../outside",
        str(outside),
        "/etc",
        "escape",  # a symlink out of the root
        ".",  # the root itself, which every source would share
    ]
    for folder in attacks:
        with pytest.raises(DomainError, match="must lie inside"):
            source_folder_set(actor=world.inst_admin, account=source, folder=folder)
    with pytest.raises(DomainError, match="create it first"):
        source_folder_set(actor=world.inst_admin, account=source, folder="missing")
    source.refresh_from_db()
    assert source.focus_folder == ""
    source_folder_set(actor=world.inst_admin, account=source, folder="aws/./")
    source.refresh_from_db()
    assert source.focus_folder == "aws"
    event = AuditEvent.objects.get(action="focus_source.folder", target_id=str(source.pk))
    assert event.after == {"folder": "aws"} and event.before == {"folder": ""}
    other = source_create(
        actor=world.inst_admin, institution=world.institution, name="AWS other", provider="AWS"
    )
    with pytest.raises(DomainError, match="Another FOCUS source reads that folder"):
        source_folder_set(actor=world.inst_admin, account=other, folder="aws")
    for person in (world.lab_admin, world.finance, world.member, world.outsider):
        with pytest.raises(PermissionDenied):
            source_folder_set(actor=person, account=source, folder="")
    source_folder_set(actor=world.inst_admin, account=source, folder="")
    source.refresh_from_db()
    assert source.focus_folder == ""


def test_an_institution_admin_cannot_name_or_reach_another_institutions_folder(world, source, root):
    """The outsider's institution drops its AWS bills under its own folder; Northfield's
    admin names it through `..`, then reaches one of its files through a symlink."""
    theirs = root.parent / "elsewhere" / "aws"
    theirs.mkdir(parents=True)
    _drop(theirs, "aws_2026_10.csv")
    with pytest.raises(DomainError, match="must lie inside"):
        source_folder_set(actor=world.inst_admin, account=source, folder="../elsewhere/aws")
    (root / "aws").mkdir()
    source_folder_set(actor=world.inst_admin, account=source, folder="aws")
    (root / "aws" / "theirs.csv").symlink_to(theirs / "aws_2026_10.csv")
    assert folders_import() == 0
    assert not FocusDrop.objects.filter(account=source).exists()
    assert not BillingRecord.objects.filter(resource__account=source).exists()
    # Each institution's folders are its own: the same name elsewhere is not a clash.
    their_source = source_create(
        actor=world.outsider,
        institution=world.outsider.memberships.get().institution,
        name="AWS",
        provider="AWS",
    )
    source_folder_set(actor=world.outsider, account=their_source, folder="aws")
    their_source.refresh_from_db()
    assert their_source.focus_folder == "aws"
    assert folders_import() == 1  # theirs, from their own folder
    assert FocusDrop.objects.filter(account=their_source, outcome="imported").count() == 1
    assert not FocusDrop.objects.filter(account=source).exists()


def test_without_a_root_no_source_has_a_folder(world, source, settings):
    settings.LABGOV_FOCUS_DROP_ROOT = ""
    with pytest.raises(DomainError, match="No folder root is configured"):
        source_folder_set(actor=world.inst_admin, account=source, folder="aws")
    assert folders_import() == 0


def test_the_worker_imports_each_new_file_once_and_keeps_what_became_of_it(
    world, source, root, tmp_path
):
    folder = root / "aws"
    folder.mkdir()
    source_folder_set(actor=world.inst_admin, account=source, folder="aws")
    _drop(folder, "aws_2026_10.csv")
    _drop(folder, "bad_decimal.csv")
    _drop(folder, "aws_2026_10_corrected.csv", age_s=10)  # still being copied in: next round
    _drop(folder, "aws_2026_10.csv", as_name=".partial.csv")
    _drop(folder, "aws_2026_10.csv", as_name="notes.txt")
    outside = tmp_path / "elsewhere.csv"
    shutil.copyfile(FILES / "eur_2026_10.csv", outside)
    (folder / "link.csv").symlink_to(outside)  # its real path leaves the root: never read

    assert focus_folders_import.delay().get() == 2
    drops = {d.file_name: d for d in FocusDrop.objects.filter(account=source)}
    assert set(drops) == {"aws_2026_10.csv", "bad_decimal.csv"}
    imported, refused = drops["aws_2026_10.csv"], drops["bad_decimal.csv"]
    assert imported.outcome == "imported" and imported.file.rows == 6
    assert imported.message.startswith("Imported October 2026: 6 rows, 5 billing records")
    assert refused.outcome == "refused" and refused.file is None
    assert "Row 3, column BilledCost: '0,00001' is not a decimal number" in refused.message
    records = BillingRecord.objects.filter(resource__account=source).count()
    assert records == 5 and FocusFile.objects.filter(account=source).count() == 1

    # Nothing new: nothing is read again, even the refused file, and files read before and
    # unchanged since are not even hashed again.
    hashed = []

    def counting(stream):
        hashed.append(stream.name)
        return focus.sha256_of(stream)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(focus_folders, "sha256_of", counting)
        assert folders_import() == 0
        assert hashed == []
        assert FocusDrop.objects.filter(account=source).count() == 2
        # The same bytes under another name are the same file: hashed, and not read.
        _drop(folder, "aws_2026_10.csv", as_name="aws_2026_10 (copy).csv")
        assert folders_import() == 0
        assert [Path(name).name for name in hashed] == ["aws_2026_10 (copy).csv"]
    assert FocusDrop.objects.filter(account=source).count() == 2

    # Settled, the correction replaces what the first file said, as an upload does.
    os.utime(folder / "aws_2026_10_corrected.csv", (NOW.timestamp() - 120,) * 2)
    assert folders_import() == 1
    corrected = FocusDrop.objects.get(account=source, file_name="aws_2026_10_corrected.csv")
    assert corrected.outcome == "imported" and corrected.file.rows == 5
    assert FocusFile.objects.filter(account=source).count() == 2


def test_a_file_uploaded_already_is_unchanged_when_it_appears_in_the_folder(world, source, root):
    folder = root / "aws"
    folder.mkdir()
    source_folder_set(actor=world.inst_admin, account=source, folder="aws")
    with open(FILES / "aws_2026_10.csv", "rb") as stream:
        focus_import(actor=world.inst_admin, account=source, stream=stream, file_name="up.csv")
    _drop(folder, "aws_2026_10.csv")
    assert folders_import() == 1
    drop = FocusDrop.objects.get(account=source)
    assert drop.outcome == "unchanged" and drop.message == "The same file was imported already."
    assert FocusFile.objects.filter(account=source).count() == 1


def test_the_page_sets_the_folder_and_shows_the_folders_files(world, source, root, client_for):
    (root / "aws").mkdir()
    url = reverse("runpod:focus_source_folder", args=[source.pk])
    page_url = reverse("runpod:focus_source", args=[source.pk])
    admin = client_for(world.inst_admin)
    page = admin.post(url, {"folder": "../../etc"})
    assert page.status_code == 200 and "must lie inside" in page.content.decode()
    answer = admin.post(url, {"folder": "aws"}, follow=True)
    assert "AWS research reads aws." in answer.content.decode()
    _drop(root / "aws", "bad_decimal.csv")
    folders_import()
    html = admin.get(page_url).content.decode()
    assert "From the folder" in html and "bad_decimal.csv" in html
    assert "Row 3, column BilledCost" in html and "A folder the worker reads" in html
    # Finance may read the page and its folder's files, not set the folder.
    finance = client_for(world.finance)
    html = finance.get(page_url).content.decode()
    assert "bad_decimal.csv" in html and "A folder the worker reads" not in html
    assert finance.post(url, {"folder": ""}).status_code == 403
    for person in (world.lab_admin, world.member, world.outsider):
        assert client_for(person).post(url, {"folder": ""}).status_code in (403, 404)
    anonymous = client_for(None)
    assert anonymous.post(url, {"folder": ""}).status_code == 302
    assert client_for(world.inst_admin).get(url).status_code == 405
    source.refresh_from_db()
    assert source.focus_folder == "aws"


def test_the_command_reads_the_folders_and_says_what_became_of_each_file(world, source, root):
    from io import StringIO

    from django.core.management import call_command

    (root / "aws").mkdir()
    source_folder_set(actor=world.inst_admin, account=source, folder="aws")
    _drop(root / "aws", "negative_quantity.csv")
    out = StringIO()
    call_command("import_focus_folders", stdout=out)
    said = out.getvalue()
    assert "AWS research: negative_quantity.csv: refused. Row 4, column ConsumedQuantity" in said
    assert said.endswith("1 file(s) read.\n")
