from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from labgov.dashboard.selectors import (
    funding_dashboard,
    home_for_user,
    institution_dashboard,
    lab_dashboard,
    my_pods,
    student_dashboard,
)
from labgov.dashboard.tables import csv_response


@login_required
@require_GET
def home(request):
    return render(request, "dashboard/home.html", {"data": home_for_user(request.user)})


def _respond(request, template: str, data, *, slug: str, extra=None):
    """The page; its #body fragment for htmx (filters and sorting); or one of its tables as
    CSV (?format=csv&table=NAME) with the same filters and order."""
    if request.GET.get("format") == "csv":
        table = data.tables.get(request.GET.get("table", ""))
        if table is None:
            raise Http404("No such table.")
        return csv_response(table, f"labgov-{slug}-{table.name}-{data.period.slug()}.csv")
    if request.htmx:
        template += "#body"
    # The range form keeps the sort orders and the chosen lab when the dates change.
    keep = [(k, v) for k, v in request.GET.items() if k.endswith("_sort") or k == "lab"]
    response = render(request, template, {"data": data, "keep": keep, **(extra or {})})
    # The same URL answers a page or a fragment: caches must tell them apart.
    patch_vary_headers(response, ("HX-Request",))
    return response


@login_required
@require_GET
def funding(request, pk: int):
    data = funding_dashboard(request.user, pk, request.GET)
    return _respond(request, "dashboard/funding.html", data, slug=f"funding-{pk}")


@login_required
@require_GET
def lab(request, pk: int):
    data = lab_dashboard(request.user, pk, request.GET)
    return _respond(request, "dashboard/lab.html", data, slug=f"lab-{pk}")


@login_required
@require_GET
def me(request):
    data = student_dashboard(request.user, request.GET)
    extra = None if request.htmx else {"my_pods": my_pods(request.user)}
    return _respond(request, "dashboard/me.html", data, slug="my-spend", extra=extra)


@login_required
@require_GET
def institution(request):
    data = institution_dashboard(request.user, request.GET)
    return _respond(request, "dashboard/institution.html", data, slug="institution")
