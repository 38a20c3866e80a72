from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from labgov.accounts import access
from labgov.dashboard.page_cache import (
    CSRF_PLACEHOLDER,
    HEADER,
    cache_state,
    cached_body,
    messages_waiting,
    page_cache_on,
    page_params,
    with_csrf_token,
)
from labgov.dashboard.selectors import (
    funding_dashboard,
    home_for_user,
    institution_dashboard,
    lab_dashboard,
    student_dashboard,
)
from labgov.dashboard.selectors.lab import lab_for_spend
from labgov.dashboard.tables import csv_response
from labgov.funding.models import FundingSource


@login_required
@require_GET
def home(request):
    def render_body() -> str:
        context = {"data": home_for_user(request.user)}
        return render_to_string("dashboard/home.html#content", context, request)

    return _page(request, "dashboard/home.html", "home", render_body)


def _page(request, template: str, page: str, render_body, around=None) -> HttpResponse:
    """The whole page around `render_body()`, from the cache when it holds it for this person,
    page, query and data version (page_cache.py); its token is this request's."""
    context = {**(around or {})}
    # Not kept (the cache off, or messages to show): rendered with this request's token in
    # place, with no placeholder to put it in afterwards.
    if not page_cache_on() or messages_waiting(request):
        response = render(request, template, {"content": render_body(), **context})
        response[HEADER] = "bypass"
        return response

    def render_page() -> str:
        context.update(content=render_body(), csrf_token=CSRF_PLACEHOLDER)
        return render_to_string(template, context, request)

    body = with_csrf_token(request, cached_body(request, page, render_page))
    response = HttpResponse(body)
    response[HEADER] = cache_state(request)
    return response


def _respond(request, template: str, compute, *, page: str, slug: str, around=None):
    """The page; its #body fragment for htmx (filters and sorting); or one of its tables as
    CSV (?format=csv&table=NAME) with the same filters and order.

    The caller has authorized the person; `compute()` reads the page's data, and only when
    the cache has not got the page (page_cache.py)."""
    params = page_params(request)
    if params.get("format") == "csv":
        data, _ = compute()
        table = data.tables.get(params.get("table", ""))
        if table is None:
            raise Http404("No such table.")
        return csv_response(table, f"labgov-{slug}-{table.name}-{data.period.slug()}.csv")

    def render_body() -> str:
        data, extra = compute()
        # The range form keeps the sort orders and the chosen lab when the dates change.
        keep = [(k, v) for k, v in params.items() if k.endswith("_sort") or k == "lab"]
        fragment = "#body" if request.htmx else "#content"
        context = {"data": data, "keep": keep, **(extra or {})}
        return render_to_string(template + fragment, context, request)

    if request.htmx:
        response = HttpResponse(cached_body(request, page, render_body))
        response[HEADER] = cache_state(request)
    else:
        response = _page(request, template, page, render_body, around)
    # The same URL answers a page or a fragment: caches must tell them apart.
    patch_vary_headers(response, ("HX-Request",))
    return response


@login_required
@require_GET
def funding(request, pk: int):
    # Authorized here on every request (404 unless the person may see it), cached or not.
    name = access.get_or_404(
        FundingSource.objects.visible_to(request.user).values_list("name", flat=True), pk=pk
    )
    return _respond(
        request,
        "dashboard/funding.html",
        lambda: (funding_dashboard(request.user, pk, page_params(request)), None),
        page=f"funding:{pk}",
        slug=f"funding-{pk}",
        around={"title": name},
    )


@login_required
@require_GET
def lab(request, pk: int):
    lab = lab_for_spend(request.user, pk)
    return _respond(
        request,
        "dashboard/lab.html",
        lambda: (lab_dashboard(request.user, pk, page_params(request), lab=lab), None),
        page=f"lab:{pk}",
        slug=f"lab-{pk}",
        around={"lab": lab},
    )


@login_required
@require_GET
def me(request):
    def compute():
        data = student_dashboard(request.user, page_params(request))
        return data, (None if request.htmx else {"my_pods": data.pods})

    return _respond(request, "dashboard/me.html", compute, page="me", slug="my-spend")


@login_required
@require_GET
def institution(request):
    access.deny_unless(bool(access.spend_institutions(request.user)))
    return _respond(
        request,
        "dashboard/institution.html",
        lambda: (institution_dashboard(request.user, page_params(request)), None),
        page="institution",
        slug="institution",
    )
