"""Fuzz every page: extreme and random values in every form field and query parameter, as
every role. A bad value is a form error, a message or a 400; never a 500.

Pages come from the URL conf, so a page added later is fuzzed without changing this file: its
<int:…> arguments are filled with the standing world's objects (or a guess from the URL name),
its forms and query parameters are read from the HTML it renders. Each request runs in a
savepoint rolled back afterwards, so one example's writes never change the next one's world.

The test client re-raises any exception of a view (a 500) as the test's failure. With
LABGOV_FUZZ_COLLECT=1 the failures are collected and printed instead, to see them all at once.
"""

import datetime as dt
import itertools
import os
import re
import time
from dataclasses import dataclass, field
from decimal import Decimal as D
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.apps import apps
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labgov.accounts.models import Membership
from labgov.alerts.models import Alert
from labgov.notifications.models import Notification
from labgov.provisioning.services import request_save, request_submit
from labgov.retention.models import RetentionCase
from labgov.runpod.models import AttributionRule, GpuType
from tests.factories import ResourceFactory, RunpodAccountFactory
from tests.provisioning.conftest import POD_VALUES

COLLECT = os.environ.get("LABGOV_FUZZ_COLLECT") == "1"
ROLES = ["inst_admin", "finance", "lab_admin", "member", "outsider", "anonymous"]
SKIP_URL_NAMES = {"logout"}  # would end the session the rest of the run needs

# Values at and past every limit a column or a parser has.
HUGE = [
    "99999999999999999999999",
    "2147483648",
    "9223372036854775808",
    "-2147483649",
    "-1",
    "0",
    "1e308",
    "-1e308",
    "9999999999.99",
    "99999999999999.99",
    "999999999999.99",
    "0.0000000001",
    "NaN",
    "Infinity",
    "-Infinity",
]
TEXTS = ["", " ", "a\x00b", "\x00", "x" * 5000, "\u202e\U0001f600é\ufeff", "' OR 1=1 --", "[]"]
DATES = ["9999-12", "0000-00", "9999-12-31", "0001-01-01", "10000-01-01", "2026-02-30", "2026-13"]
EXTREMES = HUGE + TEXTS + DATES


@dataclass
class FormSpec:
    page: str  # the URL the form was found on
    action: str
    method: str
    fields: dict[str, dict] = field(default_factory=dict)  # name -> {type, options, value}
    multipart: bool = False


class _PageParser(HTMLParser):
    """The forms of a page (fields, their kinds, choices and current values) and the query
    parameter names its links use."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.forms: list[FormSpec] = []
        self.link_params: dict[str, set[str]] = {}
        self._form: FormSpec | None = None
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        for attr in ("href", "hx-get"):
            if tag != "form" and "?" in a.get(attr, ""):
                parts = urlsplit(a[attr])
                names = {k for k, _ in parse_qsl(parts.query, keep_blank_values=True)}
                self.link_params.setdefault(parts.path, set()).update(names)
        if tag == "form":
            method = a.get("method", "get").lower()
            verb = "hx-post" if method == "post" else "hx-get"
            self._form = FormSpec(
                page="",
                action=a.get("action") or a.get(verb) or "",
                method=method,
                multipart="multipart" in a.get("enctype", ""),
            )
            self.forms.append(self._form)
            if method == "post" and a.get("hx-get"):  # a live preview: the fields as a query
                self.forms.append(FormSpec("", a["hx-get"], "get", self._form.fields))
            return
        if self._form is None:
            return
        if tag == "option" and self._select:
            spec = self._form.fields[self._select]
            spec["options"].append(a.get("value", ""))
            if "selected" in a:
                spec["value"] = a.get("value", "")
            return
        if not a.get("name"):
            return
        name = a["name"]
        if tag == "input":
            kind = a.get("type", "text").lower()
            if kind in ("submit", "button", "reset", "image"):
                return
            spec = self._form.fields.setdefault(
                name, {"type": kind, "options": [], "value": "", "attrs": a}
            )
            if kind in ("checkbox", "radio"):
                spec["options"].append(a.get("value", "on"))
                if "checked" in a:
                    spec["value"] = a.get("value", "on")
            else:
                spec["value"] = a.get("value", "")
        elif tag == "select":
            self._select = name
            self._form.fields[name] = {"type": "select", "options": [], "value": "", "attrs": a}
        elif tag == "textarea":
            self._textarea = name
            self._form.fields[name] = {"type": "textarea", "options": [], "value": "", "attrs": a}

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = None
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data):
        if self._textarea and self._form is not None:
            self._form.fields[self._textarea]["value"] += data


# -- The pages --------------------------------------------------------------------------------


def _walk(resolver, prefix="", namespace=""):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            ns = pattern.namespace or ""
            full = f"{namespace}:{ns}" if namespace and ns else (ns or namespace)
            yield from _walk(pattern, prefix + str(pattern.pattern), full)
        elif isinstance(pattern, URLPattern) and pattern.name:
            name = f"{namespace}:{pattern.name}" if namespace else pattern.name
            yield name, pattern


def url_names() -> list[tuple[str, list[tuple[str, str]]]]:
    """(url name, [(argument, converter)]) of every named page but the admin's."""
    out = []
    for name, pattern in _walk(get_resolver()):
        if name.startswith("admin:") or name in SKIP_URL_NAMES:
            continue
        converters = getattr(pattern.pattern, "converters", {})
        arguments = re.findall(r"<(?:(\w+):)?(\w+)>", str(pattern.pattern))
        out.append(
            (
                name,
                [
                    (arg, type(converters[arg]).__name__ if arg in converters else "StrConverter")
                    for _, arg in arguments
                ],
            )
        )
    return sorted(out)


# Which object an <int:…> argument names, by URL name; unknown pages are guessed below.
KNOWN_ARGS = {
    "funding:detail": "funding_source",
    "funding:edit": "funding_source",
    "funding:allocation_new": "funding_source",
    "funding:allocation_edit": "allocation",
    "accounts:lab_detail": "lab",
    "accounts:membership_end": "membership",
    "dashboard:lab": "lab",
    "dashboard:funding": "funding_source",
    "runpod:resource_assign": "resource",
    "runpod:rule_deactivate": "rule",
    "notifications:open": "notification",
    "transfers:resource_funding": "resource",
    "retention:detail": "retention_case",
    "retention:action": "retention_case",
    "retention:open": "volume",
}
BY_ARGUMENT = {"lab_id": "lab", "institution_id": "institution"}
BY_NAMESPACE = {
    "runpod": "account",
    "provisioning": "request",
    "alerts": "alert",
    "notifications": "notification",
}
STR_ARGS = {
    "alerts:transition": ["acknowledge", "snooze", "resolve", "reopen", "x\x00"],
    "alerts:pod_action": ["stop", "terminate", "x"],
    "retention:action": ["keep", "hold", "move", "request", "approve", "cancel", "x"],
}


def _guess_object(objects: dict, url_name: str, argument: str):
    """The object a new page's argument most likely names: a model of the page's app whose
    name contains a word of the URL name, else the app's usual object."""
    namespace, _, name = url_name.rpartition(":")
    words = [w for w in re.split(r"[_:]", name) if len(w) > 2]
    for config in apps.get_app_configs():
        if config.label != namespace:
            continue
        for model in config.get_models():
            if any(w in model._meta.model_name for w in words):
                obj = model.objects.order_by("pk").first()
                if obj is not None:
                    return obj
    return objects[BY_NAMESPACE.get(namespace, "lab")]


def page_urls(objects: dict) -> list[tuple[str, str]]:
    """(url name, url) of every page, with every variant of its string arguments."""
    urls = []
    for name, arguments in url_names():
        variants = [{}]
        for argument, converter in arguments:
            if converter == "IntConverter":
                if name in KNOWN_ARGS:
                    obj = objects[KNOWN_ARGS[name]]
                elif argument in BY_ARGUMENT:
                    obj = objects[BY_ARGUMENT[argument]]
                else:
                    obj = _guess_object(objects, name, argument)
                values = [obj.pk]
            else:
                values = STR_ARGS.get(name, ["x"])
            variants = [{**v, argument: value} for v in variants for value in values]
        urls.extend((name, reverse(name, kwargs=kwargs)) for kwargs in variants)
    return urls


@pytest.fixture
def objects(world):
    """The world plus one of everything a page can be about."""
    gpu = GpuType.objects.create(
        gpu_id="NVIDIA H100 80GB HBM3",
        name="H100 SXM",
        memory_gb=80,
        secure_price_per_hr_usd=D("4.39"),
        community_price_per_hr_usd=D("2.69"),
        serverless_price_per_hr_usd=D("5.00"),
        secure_available=True,
        community_available=True,
        max_count_secure=8,
        max_count_community=8,
    )
    account = RunpodAccountFactory(institution=world.institution, name="Fuzz account")
    resource = ResourceFactory(
        account=account,
        kind="pod",
        current_allocation=world.allocation,
        first_seen_at=timezone.now() - dt.timedelta(days=3),
    )
    rule = AttributionRule.objects.create(
        lab=world.lab,
        account=account,
        kind=AttributionRule.Kind.NAME_PREFIX,
        pattern="fuzz-",
        allocation=world.allocation,
    )
    values = {**POD_VALUES, "gpu_type_id": gpu.gpu_id, "gpu_count": 1}
    draft = request_save(actor=world.member, allocation=world.allocation, values=values)
    submitted = request_submit(
        actor=world.member,
        req=request_save(actor=world.member, allocation=world.allocation, values=values),
    )
    alert = Alert.objects.create(
        institution=world.institution,
        lab=world.lab,
        kind=Alert._meta.get_field("kind").choices[0][0],
        subject_key=f"resource:{resource.pk}",
        subject_label=resource.name,
        resource=resource,
        account=account,
        owner=world.member,
        severity="warning",
        title="Fuzz alert",
    )
    notification = Notification.objects.create(
        recipient=world.member,
        kind="fuzz",
        subject="Fuzz",
        url="/funding/",
        dedupe_key="fuzz",
        lab=world.lab,
    )
    volume = ResourceFactory(
        account=account,
        kind="network_volume",
        status="",
        size_gb=100,
        current_allocation=world.allocation,
        first_seen_at=timezone.now() - dt.timedelta(days=3),
    )
    retention_case = RetentionCase.objects.create(
        institution=world.institution,
        lab=world.lab,
        resource=volume,
        reason="idle",
        owner=world.member,
        payer=world.allocation,
        size_gb=100,
        due_date=timezone.now().date(),
    )
    return {
        **{name: getattr(world, name) for name in world.__dataclass_fields__},
        "volume": volume,
        "retention_case": retention_case,
        "account": account,
        "resource": resource,
        "rule": rule,
        "request": draft,
        "submitted": submitted,
        "alert": alert,
        "notification": notification,
        "membership": Membership.objects.filter(user=world.member).get(),
    }


# -- Requests ---------------------------------------------------------------------------------


@dataclass
class Tally:
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    slow: list = field(default_factory=list)
    phases: list = field(default_factory=list)


TALLY = Tally()


def _send(client: Client, method: str, url: str, data, *, what: str):
    """One request in a savepoint rolled back afterwards. A 500 fails the test (or, when
    collecting, is recorded)."""
    TALLY.requests += 1
    began = time.perf_counter()
    try:
        with transaction.atomic():
            send = client.post if method == "post" else client.get
            response = send(url, data)
            transaction.set_rollback(True)
    except Exception as exc:
        if not COLLECT:
            raise AssertionError(f"{what}: {method.upper()} {url} {data!r:.600} raised") from exc
        TALLY.failures.append(f"{type(exc).__name__}: {exc!s:.160} | {what} {method} {url}")
        return None
    TALLY.slow.append((time.perf_counter() - began, f"{method} {url} {str(data)[:80]}"))
    if response.status_code >= 500:
        message = f"{what}: {method.upper()} {url} {data!r:.600} answered {response.status_code}"
        if not COLLECT:
            raise AssertionError(message)
        TALLY.failures.append(message)
    return response


def _client(objects, role) -> Client:
    client = Client(raise_request_exception=True)
    if role != "anonymous":
        client.force_login(objects[role])
    return client


def _csv_for(objects, cells: dict[str, str]) -> SimpleUploadedFile:
    row = {
        "lab": objects["lab"].slug,
        "name": "Fuzz grant",
        "award_number": "FZ-1",
        "start_date": "2026-01-01",
        "end_date": "2026-12-31",
        "amount_usd": "100",
        "kind": "grant",
        "sponsor": "NSF",
        "cost_center": "CC",
        "indirect_cost_rate_percent": "10",
        **cells,
    }
    quote = '"{}"'.format
    body = ",".join(row) + "\r\n" + ",".join(quote(v.replace('"', '""')) for v in row.values())
    return SimpleUploadedFile("fuzz.csv", body.encode("utf-8", "surrogatepass"), "text/csv")


def _baseline(spec: dict, name: str) -> str | list[str]:
    """A value the form most likely accepts, so a sweep of one field reaches the save."""
    if spec["value"]:
        return spec["value"]
    options = [o for o in spec["options"] if o]
    if spec["type"] == "select":
        return options[0] if options else ""
    if spec["type"] == "checkbox":
        return options[:1]
    if spec["type"] == "date":
        return "2026-12-31" if "end" in name or "until" in name else "2026-01-01"
    if spec["type"] == "number":
        low = spec["attrs"].get("min")
        return low if low and D(low) > 1 else "1"
    return "fuzz"


def _bound_values(spec: dict) -> list[str]:
    """The values at a field's own limits (as rendered) or, where it renders none, past what
    any column holds."""
    attrs, kind = spec["attrs"], spec["type"]
    if kind == "number":
        if attrs.get("max"):
            return [attrs["max"], attrs.get("min") or "-99999999999999999999999"]
        return ["99999999999999999999999", "2147483648", "99999999999999.99"]
    if kind in ("text", "textarea", "search", "url", "email", "password"):
        return ["x" * int(attrs.get("maxlength") or 5000), "a\x00b"]
    if kind == "date":
        return ["9999-12-31", "0001-01-01"]
    return ["99999999999999999999999"]


def _page_forms(client, name, url) -> tuple[list[FormSpec], set[str] | None, dict]:
    """The POST forms of a page, the query parameters it uses, and those of GET forms that
    point at other pages (live previews)."""
    response = _send(client, "get", url, {}, what=f"{name} page")
    if response is None or response.status_code != 200:
        return [], None, {}
    if "html" not in response.get("Content-Type", ""):
        return [], set(), {}
    parser = _PageParser()
    parser.feed(response.content.decode())
    path = urlsplit(url).path
    params = set(parser.link_params.get(path, set())) | set(parser.link_params.get("", set()))
    forms, elsewhere = [], {}
    for form in parser.forms:
        form.page = url
        form.action = urlsplit(form.action).path or path
        if not form.action.startswith("/") or form.action.startswith(("/admin/", "/logout")):
            continue
        if form.method == "get":
            if form.action == path:
                params.update(form.fields)
            else:
                elsewhere.setdefault(form.action, set()).update(form.fields)
            continue
        forms.append(form)
    return forms, params, elsewhere


def _form_key(form: FormSpec) -> tuple:
    return (form.action, tuple(sorted(form.fields)))


@dataclass
class Targets:
    forms: list[tuple[str, FormSpec]]  # (the first role that sees it, a distinct POST form)
    pages: dict[str, list[tuple[str, str, set[str]]]]  # role -> [(name, url, GET parameters)]
    first_role: dict[str, str]  # url -> the first role the page is shown to


# Query parameters views read; the links and GET forms of each page add the rest.
KNOWN_PARAMS = {"start", "end", "page", "lab", "format", "table", "state", "kind", "q", "sort"}


def discover(objects) -> Targets:
    forms, pages, first_role, seen = [], {}, {}, set()
    urls = page_urls(objects)
    for role in ROLES:
        client = _client(objects, role)
        pages[role] = []
        previews: dict[str, set[str]] = {}
        for name, url in urls:
            page_forms, params, elsewhere = _page_forms(client, name, url)
            for action, fields in elsewhere.items():
                previews.setdefault(action, set()).update(fields)
            if params is not None:
                pages[role].append((name, url, params))
                first_role.setdefault(url, role)
            for form in page_forms:
                if _form_key(form) not in seen:
                    seen.add(_form_key(form))
                    forms.append((role, form))
        for i, (name, url, params) in enumerate(pages[role]):
            pages[role][i] = (name, url, params | previews.pop(url, set()))
        for action, fields in previews.items():
            pages[role].append((action, action, fields))
            first_role.setdefault(action, role)
    return Targets(forms, pages, first_role)


def _post(client, objects, form: FormSpec, data: dict, what: str):
    files = {}
    for name, spec in form.fields.items():
        if spec["type"] == "file":
            cell = data.pop(name, None)
            files[name] = _csv_for(objects, {"amount_usd": cell} if isinstance(cell, str) else {})
    return _send(client, "post", form.action, {**data, **files}, what=what)


def _sweep_form(client, objects, role, form: FormSpec) -> None:
    """Each field in turn at and past its limits, the others at values the form accepts."""
    baseline = {name: _baseline(spec, name) for name, spec in form.fields.items()}
    for name, spec in form.fields.items():
        if name == "csrfmiddlewaretoken":
            continue
        if spec["type"] == "file":
            for cells in CSV_EXTREMES:
                files = {name: _csv_for(objects, cells)}
                _send(client, "post", form.action, {**baseline, **files}, what=f"{role} {cells}")
            continue
        for value in _bound_values(spec):
            _post(client, objects, form, {**baseline, name: value}, f"{role} {name}")


CSV_EXTREMES = [
    {"amount_usd": "99999999999999.99"},
    {"amount_usd": "1e308"},
    {"amount_usd": "999999999999.99"},
    {"indirect_cost_rate_percent": "99999999"},
    {"name": "x" * 5000},
    {"award_number": "x" * 101},
    {"sponsor": "a\x00b"},
    {"cost_center": "x" * 201},
    {"start_date": "9999-12-31", "end_date": "9999-12-31"},
    {"kind": "x" * 50},
]
# The values every query parameter of a page takes in turn (all of them at once).
QUERY_EXTREMES = [
    "99999999999999999999999",
    "-2147483649",
    "a\x00b",
    "9999-12",
    "0000-00",
    "9999-12-31",
    "0001-01-01",
]


# -- The test ---------------------------------------------------------------------------------


def _phase(name: str) -> None:
    now = time.perf_counter()
    TALLY.phases.append((name, TALLY.requests, now))


def _report():
    if COLLECT:
        with open(os.environ.get("LABGOV_FUZZ_REPORT", "/dev/stdout"), "a") as out:
            out.write(f"\nfuzz: {TALLY.requests} requests, {len(TALLY.failures)} failures\n")
            for failure in dict.fromkeys(TALLY.failures):
                out.write(f"   {failure}\n")
            for took, what in sorted(TALLY.slow, key=lambda t: t[0])[-15:]:
                out.write(f"   {took:.2f}s {what}\n")
            out.write(f"   total {sum(t for t, _ in TALLY.slow):.1f}s\n")
            for (_, before, began), (name, count, at) in itertools.pairwise(TALLY.phases):
                out.write(f"   {name}: {count - before} requests, {at - began:.1f}s\n")


values = st.one_of(
    st.sampled_from(EXTREMES),
    st.text(max_size=300),
    st.integers().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.decimals(allow_nan=True).map(str),
    st.dates(min_value=dt.date(1, 1, 1)).map(str),
    st.lists(st.sampled_from(EXTREMES), min_size=2, max_size=3),
)


def test_fuzz_every_page(objects, monkeypatch):
    """Every page of the URL conf as every role (the pages and their forms found by opening
    them), then:

    1. every field of every form, one at a time, at the limits the form renders and past
       what any column holds (the others at values the form accepts, so the save is reached);
       the grant import with each CSV column at its limits;
    2. every page with all its query parameters at each extreme value, and its <int:…>
       arguments past what a primary key holds;
    3. property: any role, any form or page, any mix of extreme and random values.

    The fuzz account's Runpod (127.0.0.1:9) refuses every connection: the pages that call it
    make every attempt the retry policy allows, without the waits between them (about 12 s of
    sleeping; tests/runpod/test_client.py checks the waits)."""
    monkeypatch.setattr("labgov.runpod.session.BACKOFF_BASE_S", 0.0)
    _phase("start")
    targets = discover(objects)
    assert len(targets.forms) >= 20, "the pages' forms were not found"
    assert len(targets.pages["inst_admin"]) >= 40
    clients = {role: _client(objects, role) for role in ROLES}

    _phase("discovery")
    swept = set()
    for role, form in targets.forms:
        fields = frozenset(form.fields)
        if fields not in swept:  # the same form on another page (new / edit): once is enough
            swept.add(fields)
            _sweep_form(clients[role], objects, role, form)

    _phase("form sweep")
    for role, pages in targets.pages.items():
        for name, url, params in pages:
            if targets.first_role[url] != role or not params:
                continue
            for value in QUERY_EXTREMES:
                _send(clients[role], "get", url, dict.fromkeys(params, value), what=name)
    for name, arguments in url_names():
        ints = [a for a, c in arguments if c == "IntConverter"]
        if ints:
            kwargs = {a: ("99999999999999999999999" if a in ints else "x") for a, _ in arguments}
            url = reverse(name, kwargs=kwargs)
            _send(clients["inst_admin"], "get", url, {}, what=name)
            _send(clients["inst_admin"], "post", url, {}, what=name)

    _phase("query sweep")

    @settings(
        max_examples=int(os.environ.get("LABGOV_FUZZ_EXAMPLES", "40")),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def random_values(data):
        if data.draw(st.booleans(), label="post"):
            role, form = data.draw(st.sampled_from(targets.forms), label="form")
            names = [n for n in form.fields if n != "csrfmiddlewaretoken"] or ["unexpected"]
            fuzzed = data.draw(st.dictionaries(st.sampled_from(names), values), label="values")
            baseline = {n: _baseline(s, n) for n, s in form.fields.items()}
            _post(clients[role], objects, form, {**baseline, **fuzzed}, f"{role} random")
        else:
            role = data.draw(st.sampled_from(ROLES), label="role")
            name, url, params = data.draw(st.sampled_from(targets.pages[role]), label="page")
            names = sorted(params | KNOWN_PARAMS)
            query = data.draw(st.dictionaries(st.sampled_from(names), values), label="query")
            _send(clients[role], "get", url, query, what=f"{role} {name} random")

    try:
        random_values()
        _phase("random")
    finally:
        _report()
