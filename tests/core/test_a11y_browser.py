"""Everyday use in a real browser (Debian's Chromium through Playwright), on the demo data
`make run` shows (the seeder, synced from the simulator):

- every page of the URL conf, as every role, checked with axe-core (WCAG 2.1 A and AA rules):
  no serious or critical violation; the htmx states too (filters applied, a sort, a date
  range, the live estimate with its errors, the menu opened on a phone);
- every page fits 360, 390 and 1,920 px wide with no horizontal scroll;
- each role's home page photographed at 390 and 1,920 px into LABGOV_SCREENS (when set).

Pages come from the URL conf, so a page added later is swept too: one without arguments by
itself, one with arguments once PAGE_ARGS says which object to open (the test fails naming
it until then). One seeded demo, one simulator, one browser and one live server are shared
by the module's tests (seeding the demo is the slow part of a test's setup); the sweeps only
read, and the one test that changes something (stopping a pod) stops a pod the sweeps do not
open. At the module's end the database is emptied as a transactional test's end empties it."""

import datetime as dt
import os
import re
import time
from dataclasses import dataclass
from io import StringIO

import pytest
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.management import call_command
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from tests.fixtures_browser import ARGS, CHROMIUM, require_chromium
from tests.provisioning.conftest import empty_append_only

# The tests read the module's committed demo (in a transaction each, rolled back at its end):
# what they change goes through the live server, the browser's sessions were made with it.
pytestmark = [pytest.mark.browser, pytest.mark.django_db]

# The demo's people, one per role (seed_demo's PEOPLE).
ROLES = {"inst_admin": "ada", "finance": "fin", "lab_admin": "pia", "member": "sam"}
WIDTHS = (1920, 1366, 390, 360)  # 1,366: an institution admin's menu on one line
AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
    "resultTypes": ["violations"],
}

# Named URLs that are not pages: POST-only actions, fragments loaded into a page (swept with
# the page that loads them), Django's admin (not labgov's pages), and the log-in flow.
NOT_PAGES = {
    "login", "logout", "healthz",
    "funding:proposal_approve", "funding:proposal_reject",
    "runpod:account_test", "runpod:account_balance", "runpod:account_sync",
    "runpod:account_active", "runpod:account_remove", "runpod:resource_assign",
    "runpod:rule_deactivate", "runpod:tag_claim_decide", "runpod:account_cluster_limit",
    "runpod:focus_source_folder",
    "provisioning:estimate", "provisioning:submit", "provisioning:cancel", "provisioning:retry",
    "provisioning:approve", "provisioning:deny",
    "notifications:badge", "notifications:read_all", "notifications:open",
    "notifications:lab_webhook_test",
    "alerts:badge", "alerts:lab_panel", "alerts:transition",
    "accounts:membership_end", "accounts:institution_ceiling",
    # Actions (POST only) and downloads (CSV, XLSX, PDF: no page to read).
    "invoicing:close", "invoicing:issue", "invoicing:void", "invoicing:line_add",
    "invoicing:line_remove", "invoicing:generate",
    "transfers:approve", "transfers:reject", "transfers:move_approve", "transfers:move_reject",
    "exports:job_create", "exports:job_download", "exports:my_share_csv",
    "exports:invoice_csv", "exports:invoice_xlsx", "exports:invoice_pdf",
    "exports:period_lines_csv", "exports:period_journal_csv", "exports:period_records_csv",
    "exports:period_focus_csv",
    "retention:action", "retention:open",
    "idle:notice_keep", "idle:notice_allow_stop", "idle:never_stop",
    "idle:endpoint_change_decide",
    "api_token_revoke",
    "oidc_authentication_init", "oidc_authentication_callback",  # redirects to the provider
    "accounts:institution_time_zone",
    "metrics",  # Prometheus text for the scraper
}  # fmt: skip


@dataclass
class Demo:
    lab: object
    institution: object
    funding_source: object
    allocation: object
    account: object
    alert: object
    request: object
    member_pod: object
    month: object
    invoice: object
    export_job: object
    retention_case: object
    stop_notice: object
    focus_source: object
    keyboard_pod: object  # a second running pod of the member's, for the keyboard journey
    sessions: dict  # username: session key, committed for the browser
    endpoint: object


# Which object a page with arguments opens: its URL's arguments from the demo's objects.
PAGE_ARGS = {
    "funding:detail": lambda d: [d.funding_source.pk],
    "funding:proposal_change": lambda d: [d.funding_source.pk],
    "funding:edit": lambda d: [d.funding_source.pk],
    "funding:allocation_new": lambda d: [d.funding_source.pk],
    "funding:allocation_edit": lambda d: [d.allocation.pk],
    "runpod:account_detail": lambda d: [d.account.pk],
    "runpod:account_edit": lambda d: [d.account.pk],
    "runpod:focus_source": lambda d: [d.focus_source.pk],
    "dashboard:lab": lambda d: [d.lab.pk],
    "dashboard:funding": lambda d: [d.funding_source.pk],
    "provisioning:policy_lab": lambda d: [d.lab.pk],
    "provisioning:policy_default": lambda d: [d.institution.pk],
    "provisioning:detail": lambda d: [d.request.pk],
    "provisioning:edit": lambda d: [d.request.pk],
    "provisioning:mark_provisioned": lambda d: [d.request.pk],
    "notifications:lab_webhook": lambda d: [d.lab.pk],
    "alerts:settings_lab": lambda d: [d.lab.pk],
    "alerts:settings_default": lambda d: [d.institution.pk],
    "alerts:detail": lambda d: [d.alert.pk],
    "alerts:pod_action": lambda d: [d.alert.pk, "stop"],
    "alerts:own_pod_action": lambda d: [d.member_pod.pk, "stop"],
    "accounts:lab_detail": lambda d: [d.lab.pk],
    "invoicing:period": lambda d: [d.institution.pk, d.month.year, d.month.month],
    "invoicing:invoice": lambda d: [d.invoice.pk],
    "exports:period": lambda d: [d.institution.pk, d.month.year, d.month.month],
    "exports:job": lambda d: [d.export_job.pk],
    "transfers:resource_funding": lambda d: [d.member_pod.pk],
    "retention:detail": lambda d: [d.retention_case.pk],
    "retention:for_resource": lambda d: [d.member_pod.pk],  # no case: the page to open one
    "retention:policy_lab": lambda d: [d.lab.pk],
    "retention:policy_default": lambda d: [d.institution.pk],
    "idle:notice": lambda d: [d.stop_notice.pk],
    "idle:lab": lambda d: [d.lab.pk],
    "idle:policy": lambda d: [d.lab.pk],
    "idle:right_sizing": lambda d: [d.lab.pk],
    "idle:endpoint_workers": lambda d: [d.endpoint.pk],
}


def _named_urls(patterns=None, namespace=None):
    for pattern in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                continue
            yield from _named_urls(pattern.url_patterns, pattern.namespace or namespace)
        elif isinstance(pattern, URLPattern) and pattern.name:
            name = f"{namespace}:{pattern.name}" if namespace else pattern.name
            yield name, bool(pattern.pattern.converters)


def pages(demo: Demo) -> list[str]:
    """Every page of the URL conf as a path; fails naming the pages PAGE_ARGS lacks."""
    paths, missing = [], []
    for name, has_args in _named_urls():
        # The API answers JSON (and its schema YAML), checked by its own schema and
        # conformance tests; its docs page is a page and is swept.
        if name in NOT_PAGES or (name.startswith("api:") and name != "api:docs"):
            continue
        if has_args and name not in PAGE_ARGS:
            missing.append(name)
            continue
        paths.append(reverse(name, args=PAGE_ARGS[name](demo) if has_args else None))
    assert not missing, f"add these pages to PAGE_ARGS (or NOT_PAGES) in {__file__}: {missing}"
    return paths


@pytest.fixture(scope="module")
def _module_db(django_db_setup, django_db_blocker):
    """The database open to the module's tests and committed (the live server's thread reads
    it), emptied at the module's end as a transactional test's end empties it, then the
    standing world built again for the tests after it."""
    from django.db import connection

    from tests.conftest import _build_world, _remember

    with django_db_blocker.unblock():
        yield
        connection.close()  # Playwright's event loop ran in this thread: a connection anew
        empty_append_only(connection)
        call_command("flush", verbosity=0, interactive=False)
        _remember(_build_world())


@pytest.fixture(scope="module")
def live_server_url(_module_db):
    """A live server of the module's own (pytest-django's live_server would make each test a
    transactional one, whose end empties the database the next test needs)."""
    from pytest_django.live_server_helper import LiveServer

    server = LiveServer("localhost:0", start=False)
    server.thread.static_handler = _StaticKept
    server.start()
    server._live_server_modified_settings.enable()
    yield server.url
    server._live_server_modified_settings.disable()
    server.stop()


class _StaticKept(StaticFilesHandler):
    """Static files a browser may keep for the module's run, as production's hashed names
    are kept (immutable; WhiteNoise): each is fetched once per browser context,
    and V8 compiles htmx and Chart.js once instead of with every page. Routing them through
    Playwright instead disables the browser's cache: every page's statics went through
    Playwright's driver and back (~60 ms of CPU a page) and were compiled anew."""

    def serve(self, request):
        from whitenoise.base import WhiteNoise

        response = super().serve(request)
        # WhiteNoise's header for hashed names, ten years. The server's clock stands at the
        # demo scenario's fixed "now" (time machine), further behind the browser's clock
        # every day, and the age the browser reckons from the Date header must stay under
        # the max-age (an hour was stale on arrival). Past it the browser only asks again (a
        # 304): slower, never wrong.
        response["Cache-Control"] = f"max-age={WhiteNoise.FOREVER}, public, immutable"
        return response


@pytest.fixture(scope="module")
def demo(_module_db, live_server_url):
    """`make run`'s data: the demo institution synced from the simulator, plus what the seeder
    leaves to the people (a submitted request, an alert on the member's own pod); at the
    simulator's clock, so windows computed from "now" agree."""
    import time_machine

    from labgov.simulator import SimulatorServer, load_scenario

    with (
        SimulatorServer(scenario=load_scenario("default")) as sim,
        time_machine.travel(sim.state.now, tick=True),
    ):
        yield _seed(sim)


def _seed(sim) -> Demo:
    from labgov.accounts.models import Lab, User
    from labgov.alerts.models import Alert
    from labgov.exports.models import ExportJob
    from labgov.funding.models import Allocation
    from labgov.idle.models import StopNotice
    from labgov.invoicing.models import Invoice
    from labgov.invoicing.services import invoices_generate
    from labgov.provisioning.models import ProvisioningRequest
    from labgov.retention.models import RetentionCase
    from labgov.runpod.models import Resource, RunpodAccount
    from labgov.runpod.services import resource_assign

    call_command("seed_demo", simulator=sim.base_url, stdout=StringIO())
    lab = Lab.objects.get(slug="vision", institution__slug="northfield")
    sam = User.objects.get(username="sam")
    allocation = Allocation.objects.filter(user=sam).first()
    request = _submitted_request(sam, allocation)
    # A running pod of the demo's, paid by the member's allocation (theirs to stop).
    pod = Resource.objects.filter(
        account__institution=lab.institution, kind="pod", status="RUNNING"
    ).first()
    resource_assign(actor=User.objects.get(username="pia"), resource=pod, allocation=allocation)
    finance = User.objects.get(username="fin")
    month = timezone.now().date().replace(day=1)
    invoices = invoices_generate(actor=finance, institution=lab.institution, month=month)
    export_job = ExportJob.objects.create(
        institution=lab.institution,
        requested_by=finance,
        kind=ExportJob.Kind.values[0],
        month=month,
        download_name="northfield.xlsx",
    )
    now = timezone.now()
    notice = StopNotice.objects.create(
        resource=pod,
        lab=lab,
        owner=sam,
        idle_since=now - dt.timedelta(hours=6),
        warned_at=now,
        stop_at=now + dt.timedelta(minutes=30),
    )
    # The keyboard journey stops a pod of the member's: another running one, so the sweeps'
    # pod stays running whichever test runs first.
    keyboard_pod = (
        Resource.objects.filter(account__institution=lab.institution, kind="pod", status="RUNNING")
        .exclude(pk=pod.pk)
        .first()
    )
    assert keyboard_pod is not None, "the demo has a second running pod"
    resource_assign(
        actor=User.objects.get(username="pia"), resource=keyboard_pod, allocation=allocation
    )
    sessions = {}
    for username in {*ROLES.values(), "sam", "pia"}:
        client = Client()
        client.force_login(User.objects.get(username=username))
        sessions[username] = client.cookies["sessionid"].value
    return Demo(
        lab=lab,
        institution=lab.institution,
        funding_source=allocation.funding_source,
        allocation=allocation,
        account=RunpodAccount.objects.get(institution=lab.institution),
        alert=Alert.objects.filter(lab=lab).order_by("pk").first() or Alert.objects.first(),
        request=request or ProvisioningRequest.objects.first(),
        member_pod=pod,
        month=month,
        invoice=invoices[0] if invoices else Invoice.objects.first(),
        export_job=export_job,
        retention_case=RetentionCase.objects.filter(lab=lab).first()
        or RetentionCase.objects.first(),
        stop_notice=notice,
        focus_source=_focus_source(lab.institution),
        keyboard_pod=keyboard_pod,
        sessions=sessions,
        endpoint=Resource.objects.filter(
            account__institution=lab.institution, kind="serverless"
        ).first(),
    )


def _focus_source(institution):
    """An AWS FOCUS billing source with October 2026's hand-written file imported."""
    from pathlib import Path

    from labgov.accounts.models import Membership, Role
    from labgov.runpod.focus import focus_import, source_create

    admin = (
        Membership.objects.filter(institution=institution, role=Role.INSTITUTION_ADMIN).first().user
    )
    source = source_create(actor=admin, institution=institution, name="AWS", provider="AWS")
    path = Path(__file__).parents[1] / "runpod" / "focus_files" / "aws_2026_10.csv"
    with open(path, "rb") as stream:
        focus_import(actor=admin, account=source, stream=stream, file_name=path.name, late=True)
    return source


def _submitted_request(user, allocation):
    from decimal import Decimal

    from labgov.provisioning.selectors import gpu_catalog
    from labgov.provisioning.services import request_save, request_submit

    gpu = gpu_catalog().first()
    req = request_save(
        actor=user,
        allocation=allocation,
        values={
            "title": "Fine-tune 8B",
            "deployment_model": "pod",
            "gpu_type_id": gpu.gpu_id,
            "gpu_count": 1,
            "cloud": "SECURE",
            "image": "runpod/pytorch:2.8.0",
            "expected_hours": Decimal(10),
            "justification": "Thesis chapter 3.",
        },
    )
    return request_submit(actor=user, req=req)


@pytest.fixture(scope="module")
def playwright_browser(_module_db):
    require_chromium()
    from django.db import connections
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch, sync_playwright() as p:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield browser
        browser.close()
        connections.close_all()


def logged_in(browser, base_url: str, demo: Demo, username: str, *, width=1920):
    """A page whose context holds `username`'s session (no trip through the login form)."""
    # Reduced motion (which labgov.css honours): an element htmx faded while it loaded is back
    # at full opacity as soon as the request ends, not 200 ms later, when axe may be measuring
    # its contrast.
    context = browser.new_context(viewport={"width": width, "height": 900}, reduced_motion="reduce")
    context.add_cookies([{"name": "sessionid", "value": demo.sessions[username], "url": base_url}])
    # axe-core is loaded by the browser with every page; the static files come from the
    # browser's cache after their first load (_StaticKept).
    from axe_playwright_python.base import AXE_FILE_PATH

    context.add_init_script(path=str(AXE_FILE_PATH))
    page = context.new_page()
    page.set_default_timeout(10_000)
    return page


class CheckedMakes:
    """The page makes axe has checked in this test run, by any role's sweep in any worker: a
    file of their digests beside the workers' temporary directories, claimed under a lock.
    The same page shown to another role is often of the same make (the same kinds of
    elements in the same kinds of places): 144 distinct makes among the 193 the four sweeps
    met. A sweep run alone (one role, -k) starts from an empty file and checks all of its
    own."""

    def __init__(self, path):
        self.path = path

    def claim(self, make: str) -> bool:
        """Whether the caller is the first of the run to check this make (and must)."""
        import fcntl
        import hashlib

        digest = hashlib.sha256(make.encode()).hexdigest()
        with open(self.path, "a+") as shared:
            fcntl.flock(shared, fcntl.LOCK_EX)
            shared.seek(0)
            if digest in shared.read().split():
                return False
            shared.write(digest + "\n")
            return True


@pytest.fixture(scope="session")
def checked_makes(tmp_path_factory) -> CheckedMakes:
    # xdist gives each worker a directory of the run's own one; without it (-n 0, or -p
    # no:xdist, where its worker_id fixture does not exist), the run's own.
    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return CheckedMakes((base.parent if worker else base) / "axe-checked-makes")


class Sweep:
    """Counts what it checked; keeps every serious or critical violation and every overflow."""

    def __init__(self, shared: CheckedMakes | None = None):
        self.shared = shared
        self.visits = 0
        self.makes: set[str] = set()
        self.checked = 0
        self.by_others = 0
        self.states = 0
        self.minor = 0
        self.failures: list[str] = []
        self.overflows: list[str] = []

    def check(self, page, label: str, *, context=None) -> None:
        """Run axe on the page, unless a page of the same make was checked already: the same
        kinds of elements (tag, classes, role, ARIA attributes) in the same kinds of places,
        however many rows its tables have or whose figures they show, with the same menu."""
        self.visits += 1
        make = page.evaluate(SIGNATURE)
        if make in self.makes:
            return
        self.makes.add(make)
        if self.shared is not None and not self.shared.claim(make):
            self.by_others += 1  # checked by another role's sweep of this run
            return
        # 100-700 ms a page, 80-95 % of it axe's color-contrast rule (its background of every
        # text element), whatever the page's size: hence one check per make.
        violations = page.evaluate(
            "([context, options]) => axe.run(context || document, options).then(r => r.violations)",
            [context, AXE_OPTIONS],
        )
        self.checked += 1
        for v in violations:
            if v["impact"] in ("serious", "critical"):
                targets = [n["target"] for n in v["nodes"][:3]]
                self.failures.append(f"{label}: {v['id']} ({v['impact']}) {targets}")
            else:
                self.minor += 1

    def fits(self, page, label: str) -> None:
        width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        if width[0] > width[1]:
            culprit = page.evaluate(WIDEST)
            self.overflows.append(f"{label}: {width[0]} px wide in {width[1]} px ({culprit})")


# A page's make: the set of its elements' kinds, each with its parent's kind.
SIGNATURE = """() => {
  const kind = (e) => [e.tagName, e.className, e.getAttribute('role') || '',
    e.getAttribute('type') || '', e.getAttribute('aria-current') || '', e.hasAttribute('href'),
    e.getAttributeNames().filter(n => n.startsWith('aria-') || n === 'tabindex').join(',')
  ].join('|');
  const kinds = new Set();
  for (const e of document.body.querySelectorAll('*')) {
    kinds.add(kind(e) + '<' + (e.parentElement ? kind(e.parentElement) : ''));
  }
  return [...kinds].sort().join('\\n');
}"""


# The outermost element sticking out of the window, not inside a box that scrolls.
WIDEST = """() => {
  const scrolls = (e) => { for (let a = e.parentElement; a; a = a.parentElement) {
    if (['auto', 'scroll'].includes(getComputedStyle(a).overflowX)) return true; } return false; };
  for (const e of document.body.querySelectorAll('*')) {
    if (e.getBoundingClientRect().right > innerWidth + 1 && !scrolls(e))
      return e.tagName + '.' + e.className + ' ' + (e.id || '');
  }
  return '';
}"""


def _settled(page) -> None:
    """Wait for the fragments htmx loads after the page (the menu's badges) and any request
    in flight: an element waiting for htmx is drawn faded. One script in the page watching
    its changes, where three locator waits (Playwright's selector engine, polling) made the
    browser spend a quarter more CPU in this wait, on every page of the sweep."""
    page.evaluate(SETTLED, 10_000)


# Resolves once each badge the page has holds its count (htmx gives it a title) and no htmx
# request is in flight; fails after `timeout` ms naming what it still waits for.
SETTLED = """(timeout) => new Promise((resolve, reject) => {
  const badges = ['#unread-badge', '#alert-badge'].filter(s => document.querySelector(s));
  const waiting = () => [...badges.filter(s => !document.querySelector(s + '[title]')),
    ...(document.querySelector('.htmx-request') ? ['.htmx-request'] : [])];
  if (!waiting().length) return resolve();
  const watch = new MutationObserver(() => {
    if (!waiting().length) { watch.disconnect(); resolve(); }
  });
  watch.observe(document, {subtree: true, childList: true, attributes: true});
  setTimeout(() => { watch.disconnect(); reject(new Error('still waiting for ' + waiting())); },
    timeout);
})"""


# The states htmx puts a page in, per role: (path, what to do, what then shows).
def _preset(page):
    page.locator(".presets a").first.click()
    page.wait_for_url(re.compile(r".*[?&]start="), wait_until="commit")


def _sort(page):
    page.locator("#dash-body th a").first.click()
    page.wait_for_url(re.compile(r".*_sort="), wait_until="commit")


def _search(page):
    page.fill("input[name=q]", "NSF")
    page.wait_for_url(re.compile(r".*[?&]q=NSF"), wait_until="commit")


def _filter_alerts(page):
    page.select_option("select[name=severity]", index=1)
    page.wait_for_url(re.compile(r".*[?&]severity="), wait_until="commit")


def _estimate(page):
    page.fill("#id_title", "Fine-tune 8B")
    page.fill("#id_expected_hours", "10")
    try:
        page.locator("[data-figure=total]").wait_for()
    except Exception:
        raise AssertionError(page.locator("#estimate").inner_text()) from None


def _estimate_errors(page):
    page.fill("#id_gpu_count", "-3")
    try:
        page.locator("#id_gpu_count-error").filter(has_text="1").wait_for()
    except Exception:
        raise AssertionError(
            page.locator("#estimate").inner_text()
            + page.locator(".request-form").inner_html()[:3000]
        ) from None


def _menu_open(page):
    page.set_viewport_size({"width": 390, "height": 900})
    page.click(".menu-toggle")
    page.locator("#menu").wait_for(state="visible")


STATES = {
    "inst_admin": [
        ("/spend/institution/", _preset),
        ("/spend/institution/", _sort),
        ("/runpod/resources/", lambda p: p.select_option("select[name=kind]", "pod")),
    ],
    "finance": [("/funding/", _search), ("/alerts/", _filter_alerts)],
    "lab_admin": [("/spend/labs/{lab}/", _preset), ("/", _menu_open)],
    "member": [
        ("/provisioning/new/", _estimate),
        ("/provisioning/new/", _estimate_errors),
        ("/", _menu_open),
    ],
}


@pytest.mark.parametrize("role", list(ROLES))
def test_every_page_is_accessible_and_fits(
    role, demo, playwright_browser, live_server_url, checked_makes
):
    """Each role in its own test, so a failure names the role; the roles run on one worker
    (tests/conftest.py deals a module's slow tests together), sharing one seeded demo. A page
    make another role's sweep checked already, in this worker or another, is not checked
    again."""
    from labgov.accounts.models import User

    started = time.monotonic()
    sweep = Sweep(checked_makes)
    paths = pages(demo)
    screens = os.environ.get("LABGOV_SCREENS")
    page = logged_in(playwright_browser, live_server_url, demo, ROLES[role])
    # Each path's answer read in-process first (milliseconds; a browser visit takes a tenth of
    # a second or more): the browser opens every page, and each error page once.
    client = Client()
    client.force_login(User.objects.get(username=ROLES[role]))
    error_pages_seen = set()
    for path in paths:
        status = client.get(path, follow=True).status_code  # as the browser follows redirects
        assert status in (200, 403, 404), (role, path, status)
        label = f"{role} {path} ({status})"
        if status != 200:
            if status in error_pages_seen:
                continue
            error_pages_seen.add(status)
        page.set_viewport_size({"width": 1920, "height": 900})
        response = page.goto(f"{live_server_url}{path}")
        assert (response.status if response else 0) == status, (role, path, status)
        _settled(page)
        sweep.check(page, label)
        # At the widths only the layout is read: hidden (visibility), every box keeps its place
        # and size and still counts towards the page's width, and nothing is drawn at each new
        # width (member's and finance's sweeps: 25.4-26.0 -> 23.9-24.7 CPU-s of the browser).
        page.evaluate("document.documentElement.style.visibility = 'hidden'")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            sweep.fits(page, f"{label} at {width} px")
        if path == "/" and screens:
            page.evaluate("document.documentElement.style.visibility = ''")
            for width in (390, 1920):
                page.set_viewport_size({"width": width, "height": 900})
                page.screenshot(path=f"{screens}/{role}-home-{width}.png", full_page=True)
    for path, act in STATES[role]:
        page.set_viewport_size({"width": 1920, "height": 900})
        path = path.format(lab=demo.lab.pk)
        page.goto(f"{live_server_url}{path}")
        _settled(page)
        act(page)
        _settled(page)
        label = f"{role} {path} after {getattr(act, '__name__', 'a filter')}"
        sweep.visits -= 1  # counted below as a state, not a page
        sweep.check(page, label)
        sweep.states += 1
        sweep.fits(page, label)
    page.context.close()
    print(
        f"\naxe sweep as {role}: {sweep.visits} pages and {sweep.states} htmx states visited "
        f"({len(paths)} pages in the URL conf, each error page once), {sweep.checked} of "
        f"distinct make checked with axe ({sweep.by_others} more checked by another role's "
        f"sweep): {len(sweep.failures)} serious/critical, "
        f"{sweep.minor} minor; {len(sweep.overflows)} overflows at {WIDTHS} px; "
        f"{time.monotonic() - started:.1f} s"
    )
    assert sweep.failures == [], "\n".join(sweep.failures)
    assert sweep.overflows == [], "\n".join(sweep.overflows)


def test_keyboard_phone_and_back_button_journeys(demo, playwright_browser, live_server_url):
    """With the keyboard alone, on a phone and a desktop: the menu opens and closes, focus is
    visible and lands on what htmx replaced, a date range is in the URL and comes back with
    the back button, and a member stops their own running pod after confirming."""
    from labgov.audit.models import AuditEvent

    pod = demo.keyboard_pod  # a running pod paid by the member's allocation
    page = logged_in(playwright_browser, live_server_url, demo, "sam", width=390)
    page.goto(f"{live_server_url}/")
    # The menu is folded away on a phone; the first Tab reaches "Skip to content", the next
    # ones the Menu button, which Enter opens and Escape closes (focus back on the button).
    assert not page.locator("#menu").is_visible()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    toggle = page.locator(".menu-toggle")
    toggle.focus()
    page.keyboard.press("Enter")
    page.locator("#menu").wait_for(state="visible")
    assert toggle.get_attribute("aria-expanded") == "true"
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    page.keyboard.press("Escape")
    page.locator("#menu").wait_for(state="hidden")
    assert page.evaluate("document.activeElement.classList.contains('menu-toggle')")
    # Focus is drawn where it is.
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"

    # The member stops their own running pod from My spend: Tab to it, Enter, confirm.
    page.set_viewport_size({"width": 1920, "height": 900})
    page.goto(f"{live_server_url}/spend/me/")
    row = page.locator(f"#pod-{pod.pk}")
    assert "per hour" in row.locator("[data-figure=pod-cost]").inner_text()
    row.get_by_role("link", name=re.compile("^Stop")).focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/pods/\d+/stop/$"))
    assert "per month while stopped" in page.locator("[data-figure=stop-cost]").inner_text()
    page.get_by_role("button", name="Yes, stop it").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/spend/me/$"))
    assert "per month" in page.locator(f"#pod-{pod.pk} [data-figure=pod-cost]").inner_text()
    assert page.locator(f"#pod-{pod.pk}").get_by_role("link", name=re.compile("^Start")).count()
    assert AuditEvent.objects.filter(action="runpod.pod_stop", actor__username="sam").exists()

    # A lab admin picks "last month" with the keyboard: the region htmx replaced has the
    # focus, the URL says the range, and the back button brings the first range back.
    admin = logged_in(playwright_browser, live_server_url, demo, "pia")
    admin.goto(f"{live_server_url}/spend/labs/{demo.lab.pk}/")
    first_url = admin.url
    first_start = admin.locator("input[name=start]").input_value()
    preset = admin.locator(".presets a").first
    preset.focus()
    admin.keyboard.press("Enter")
    admin.wait_for_url(re.compile(r".*[?&]start="), wait_until="commit")
    # Focus moves once htmx has settled the swap (labgov.js, on htmx:afterSettle, 20 ms after
    # the swap that pushed the URL): waited for, up to the page's timeout, not read at once.
    from playwright.sync_api import expect

    expect(admin.locator("#dash-body")).to_be_focused()
    _settled(admin)
    chosen = admin.locator("input[name=start]").input_value()
    assert chosen != first_start
    bookmark = admin.url
    admin.go_back()
    admin.wait_for_url(first_url, wait_until="commit")
    admin.locator("input[name=start]").wait_for()
    assert admin.locator("input[name=start]").input_value() == first_start
    # The bookmarked URL opens on the chosen range.
    admin.goto(bookmark)
    assert admin.locator("input[name=start]").input_value() == chosen
    page.context.close()
    admin.context.close()
