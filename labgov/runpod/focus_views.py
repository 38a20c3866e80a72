"""Pages of FOCUS billing sources: the list, adding one, and a source's page, where an
institution admin uploads a month's file and everyone who may see the source reads its files.
"""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab
from labgov.core.errors import DomainError
from labgov.runpod.focus import focus_import, source_create
from labgov.runpod.focus_folders import institution_folder, source_folder_set
from labgov.runpod.forms import FocusFileForm, FocusFolderForm, FocusSourceForm
from labgov.runpod.models import BillingSource, FocusDrop, FocusFile, RunpodAccount


def _sources_for(user):
    return (
        RunpodAccount.objects.filter(access.runpod_accounts_q(user))
        .filter(billing_source=BillingSource.FOCUS)
        .select_related("lab")
        .order_by("name")
    )


@login_required
@require_http_methods(["GET"])
def focus_sources(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.money_institutions or scope.admin_labs))
    return render(
        request,
        "runpod/focus_sources.html",
        {"sources": list(_sources_for(request.user)), "can_add": bool(scope.admin_institutions)},
    )


@login_required
@require_http_methods(["GET", "POST"])
def focus_source_new(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.admin_institutions))
    institution = (
        Institution.objects.filter(pk__in=scope.admin_institutions).order_by("name").first()
    )
    form = FocusSourceForm(request.POST or None, labs=Lab.objects.filter(institution=institution))
    if request.method == "POST" and form.is_valid():
        try:
            source = source_create(actor=request.user, institution=institution, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Added {source.name}. Upload a month's FOCUS file.")
            return redirect("runpod:focus_source", pk=source.pk)
    return render(request, "runpod/focus_source_form.html", {"form": form})


@login_required
@require_http_methods(["GET", "POST"])
def focus_source(request, pk: int):
    source = access.get_or_404(_sources_for(request.user), pk=pk)
    can_import = access.can_manage_runpod_account(request.user, source.institution_id)
    form = FocusFileForm(request.POST or None, request.FILES or None)
    if request.method == "POST":
        access.deny_unless(can_import)
        upload = request.FILES.get("file")
        if upload is not None and upload.size > settings.LABGOV_FOCUS_MAX_UPLOAD_MB << 20:
            form.add_error(
                "file",
                f"The file is larger than {settings.LABGOV_FOCUS_MAX_UPLOAD_MB} MB "
                "(LABGOV_FOCUS_MAX_UPLOAD_MB); import it with manage.py import_focus.",
            )
        elif form.is_valid():
            try:
                result = focus_import(
                    actor=request.user,
                    account=source,
                    stream=upload.file,
                    file_name=upload.name,
                    late=form.cleaned_data["late"],
                )
            except DomainError as exc:
                form.add_error("file", exc.message)
            else:
                f = result.file
                if result.unchanged:
                    messages.info(request, f"{upload.name} was imported already: nothing changed.")
                else:
                    messages.success(
                        request,
                        f"Imported {f.period_start:%B %Y}: {f.rows} rows, {f.records} billing "
                        f"records, {f.billed_total} {f.currency}.",
                    )
                return redirect("runpod:focus_source", pk=source.pk)
    return _source_page(request, source, form, can_import)


def _source_page(request, source, form, can_import, folder_form=None):
    files = list(
        FocusFile.objects.filter(account=source)
        .select_related("imported_by")
        .order_by("-period_start", "-imported_at", "-id")[:60]
    )
    drops = list(FocusDrop.objects.filter(account=source).order_by("-found_at", "-id")[:60])
    root = institution_folder(source.institution)
    if folder_form is None and can_import and root is not None:
        folder_form = FocusFolderForm(initial={"folder": source.focus_folder})
    return render(
        request,
        "runpod/focus_source.html",
        {
            "source": source,
            "files": files,
            "drops": drops,
            "form": form,
            "folder_form": folder_form,
            "folder_root": root,
            "can_import": can_import,
        },
    )


@login_required
@require_http_methods(["POST"])
def focus_source_folder(request, pk: int):
    source = access.get_or_404(_sources_for(request.user), pk=pk)
    can_import = access.can_manage_runpod_account(request.user, source.institution_id)
    access.deny_unless(can_import)
    folder_form = FocusFolderForm(request.POST)
    if folder_form.is_valid():
        try:
            source_folder_set(
                actor=request.user, account=source, folder=folder_form.cleaned_data["folder"]
            )
        except DomainError as exc:
            folder_form.add_error("folder", exc.message)
        else:
            messages.success(
                request,
                f"{source.name} reads {source.focus_folder}."
                if source.focus_folder
                else f"{source.name} reads no folder.",
            )
            return redirect("runpod:focus_source", pk=source.pk)
    return _source_page(request, source, FocusFileForm(), can_import, folder_form)
