"""FOCUS sources' folders: an institution admin gives a source a folder under the configured
root (LABGOV_FOCUS_DROP_ROOT), and the worker imports the files that appear there, as if each
were uploaded on the source's page by nobody in particular.

The guarantees. A source's folder is always inside its institution's own folder under the root,
`<root>/<institution slug>/`, so no institution's admin can name, or read through a symlink,
the files dropped for another: the path is resolved (`..`, symlinks) when it is set and again
on every round, and a file whose real path leaves the institution's folder is not read.
Two sources never share a folder (each would import the other's bills). A file is read once
per content: its SHA-256 is claimed (`FocusDrop`, unique on source and digest) before it is
imported, so two workers never import one file and the same bytes under a new name are not read
again; what became of it (imported, unchanged, refused with the import's own words) is kept
and shown beside the uploads. A file younger than LABGOV_FOCUS_SETTLE_SECONDS may still be
being copied in: it waits for the next round. The import itself is the upload's
(labgov/runpod/focus.py): one transaction, nothing written by a refused file.
"""

import datetime as dt
import logging
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.runpod.focus import focus_import, sha256_of
from labgov.runpod.models import BillingSource, FocusDrop, RunpodAccount

log = logging.getLogger(__name__)

# A claim whose worker died mid-import is taken again after this long.
STALE_CLAIM = dt.timedelta(hours=1)


def drop_root() -> Path | None:
    root = settings.LABGOV_FOCUS_DROP_ROOT
    return Path(root).resolve() if root else None


def institution_folder(institution) -> Path | None:
    """The institution's own folder under the root: its sources' folders lie inside it."""
    root = drop_root()
    return root / institution.slug if root is not None else None


def folder_path(folder: str, institution) -> Path:
    """The real path of a source's folder, refused in words unless it lies inside the
    institution's folder under the root."""
    base = institution_folder(institution)
    if base is None:
        raise DomainError(
            "No folder root is configured (LABGOV_FOCUS_DROP_ROOT): files are uploaded.",
            field="folder",
        )
    base = base.resolve()
    path = (base / folder).resolve()
    if path == base or not path.is_relative_to(base):
        raise DomainError(
            f"The folder must lie inside {base} (your institution's folder under "
            "LABGOV_FOCUS_DROP_ROOT), below it.",
            field="folder",
        )
    return path


@transaction.atomic
def source_folder_set(*, actor, account: RunpodAccount, folder: str) -> RunpodAccount:
    """An institution admin gives a FOCUS source the folder the worker reads (blank: none)."""
    from labgov.accounts import access

    access.deny_unless(access.can_manage_runpod_account(actor, account.institution_id))
    if not account.is_focus:
        raise DomainError(f"{account.name} is a Runpod connection: it is synced, not imported.")
    folder = (folder or "").strip()
    relative = ""
    if folder:
        path = folder_path(folder, account.institution)
        if not path.is_dir():
            raise DomainError(
                f"{path} is not a folder: create it first, then name it here.", field="folder"
            )
        relative = path.relative_to(institution_folder(account.institution).resolve()).as_posix()
        if len(relative) > 500:
            raise DomainError("The folder's path is longer than 500 characters.", field="folder")
        other = (
            RunpodAccount.objects.filter(
                institution_id=account.institution_id, focus_folder=relative
            )
            .exclude(pk=account.pk)
            .first()
        )
        if other is not None:
            raise DomainError(
                "Another FOCUS source reads that folder already: give each its own.",
                field="folder",
            )
    before = account.focus_folder
    RunpodAccount.objects.filter(pk=account.pk).update(focus_folder=relative)
    account.focus_folder = relative
    audit_record(
        actor=actor,
        action="focus_source.folder",
        target=account,
        institution_id=account.institution_id,
        before={"folder": before},
        after={"folder": relative},
    )
    return account


def folders_import() -> int:
    """Every active FOCUS source with a folder: import its new files. Returns files read."""
    if drop_root() is None:
        return 0
    sources = RunpodAccount.objects.filter(
        billing_source=BillingSource.FOCUS, is_active=True
    ).exclude(focus_folder="")
    sources = sources.select_related("institution").order_by("pk")
    return sum(folder_import(account=account) for account in sources)


def folder_import(*, account: RunpodAccount) -> int:
    try:
        path = folder_path(account.focus_folder, account.institution)
    except DomainError as exc:
        log.warning("FOCUS source %s: folder %r refused: %s", account.pk, account.focus_folder, exc)
        return 0
    if not path.is_dir():
        log.warning("FOCUS source %s: folder %s is missing", account.pk, path)
        return 0
    root, now = institution_folder(account.institution).resolve(), timezone.now()
    FocusDrop.objects.filter(
        account=account, outcome=FocusDrop.Outcome.IMPORTING, found_at__lt=now - STALE_CLAIM
    ).delete()
    settle = dt.timedelta(seconds=settings.LABGOV_FOCUS_SETTLE_SECONDS)
    # Files read before, unchanged since: not hashed again.
    seen = set(
        FocusDrop.objects.filter(account=account).values_list(
            "file_name", "size_bytes", "modified_at"
        )
    )
    read = 0
    for entry in sorted(path.iterdir()):
        if entry.name.startswith(".") or entry.suffix.lower() != ".csv":
            continue
        real = entry.resolve()
        if not real.is_relative_to(root) or not real.is_file():
            continue
        stat = real.stat()
        changed = dt.datetime.fromtimestamp(stat.st_mtime, tz=dt.UTC)
        if now - changed < settle:
            continue
        if (entry.name, stat.st_size, changed) in seen:
            continue
        with open(real, "rb") as stream:
            sha = sha256_of(stream)
            if FocusDrop.objects.filter(account=account, sha256=sha).exists():
                continue
            drop = _claim(account, entry.name, sha, stat.st_size, changed)
            if drop is None:
                continue
            read += 1
            _import(account, drop, stream)
    return read


def _claim(account, name: str, sha: str, size: int, changed) -> FocusDrop | None:
    try:
        with transaction.atomic():
            return FocusDrop.objects.create(
                account=account,
                file_name=name[:255],
                sha256=sha,
                size_bytes=size,
                modified_at=changed,
                outcome=FocusDrop.Outcome.IMPORTING,
            )
    except IntegrityError:
        return None  # another worker has it


def _import(account, drop: FocusDrop, stream) -> None:
    try:
        result = focus_import(
            actor=None, account=account, stream=stream, file_name=drop.file_name, check_access=False
        )
    except DomainError as exc:
        outcome, message, file = FocusDrop.Outcome.REFUSED, exc.message, None
    else:
        file = result.file
        if result.unchanged:
            outcome, message = FocusDrop.Outcome.UNCHANGED, "The same file was imported already."
        else:
            outcome = FocusDrop.Outcome.IMPORTED
            message = (
                f"Imported {file.period_start:%B %Y}: {file.rows} rows, {file.records} billing "
                f"records, {file.billed_total} {file.currency}."
            )
    FocusDrop.objects.filter(pk=drop.pk).update(
        outcome=outcome, message=message, file=file, finished_at=timezone.now()
    )
