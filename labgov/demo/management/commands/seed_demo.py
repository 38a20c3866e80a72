"""Seed a demo institution: labs, people of every role, grants and allocations.

Safe to run again: it does nothing when the demo institution exists.
"""

import datetime as dt
from decimal import Decimal

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from labgov.accounts.models import Institution, Lab, Role, User
from labgov.accounts.services import institution_create, lab_create, membership_grant
from labgov.funding.models import Allocation, FundingSource
from labgov.funding.services import allocation_create, funding_source_create

DEMO_SLUG = "northfield"
SIM_ACCOUNT = "Northfield Runpod (simulator)"
# The utilization history the demo starts with: enough for an idle alert at once and for
# right-sizing's one day of samples.
HISTORY_HOURS = 30
HISTORY_STEP = dt.timedelta(minutes=15)
DEMO_PASSWORD = "labgov-demo"  # noqa: S105 - printed for the demo, never used in production

PEOPLE = [
    # username, first, last, role, lab slug
    ("admin", "Site", "Admin", None, None),
    ("ada", "Ada", "Okafor", Role.INSTITUTION_ADMIN, None),
    ("fin", "Farah", "Lindqvist", Role.FINANCE, None),
    ("pia", "Pia", "Moreau", Role.LAB_ADMIN, "vision"),
    ("lee", "Lee", "Tanaka", Role.LAB_ADMIN, "nlp"),
    ("sam", "Sam", "Rivera", Role.MEMBER, "vision"),
    ("kim", "Kim", "Novak", Role.MEMBER, "vision"),
    ("raj", "Raj", "Iyer", Role.MEMBER, "nlp"),
    ("tara", "Tara", "Walsh", Role.MEMBER, "dl-course"),
]


class Command(BaseCommand):
    help = "Seed the demo institution (idempotent) and print the demo logins."

    def add_arguments(self, parser):
        parser.add_argument(
            "--simulator",
            metavar="URL",
            help="connect the demo institution to a Runpod simulator at URL and sync it",
        )

    def handle(self, *args, simulator=None, **options):
        if Institution.objects.filter(slug=DEMO_SLUG).exists():
            self.stdout.write("Demo institution exists already; nothing to seed.")
        else:
            self._seed()
            self.stdout.write(self.style.SUCCESS("Seeded the demo institution."))
        if simulator:
            self._connect_simulator(simulator)
        self._print_logins()

    def _connect_simulator(self, url: str) -> None:
        from labgov.runpod.models import RunpodAccount, SyncRun
        from labgov.runpod.services import account_connect
        from labgov.runpod.sync import account_sync

        institution = Institution.objects.get(slug=DEMO_SLUG)
        account = RunpodAccount.objects.filter(institution=institution, name=SIM_ACCOUNT).first()
        if account is None:
            account = account_connect(
                actor=None,
                institution=institution,
                name=SIM_ACCOUNT,
                api_key="sim-key",
                write_key="sim-key",
                base_url=url,
            )
        elif account.base_url != url.rstrip("/"):
            account.base_url = url.rstrip("/")
            account.save(update_fields=["base_url"])
        self.stdout.write(f"Syncing {account.name} from {url} …")
        run = account_sync(account_id=account.pk, trigger=SyncRun.Trigger.COMMAND)
        if run.status == SyncRun.Status.SUCCEEDED:
            self.stdout.write(self.style.SUCCESS(f"Synced {run.counts.get('records', 0)} records."))
            self._confirm_tags(account)
            self._utilization_history(account, url)
            self._claim_stopped_pod(account)
        else:
            self.stdout.write(self.style.WARNING(f"Sync {run.status}: {run.error}"))

    def _confirm_tags(self, account) -> None:
        """The demo account is shared by the institution's labs, so its tagged pods wait for
        their allocations' holders (runpod/tag_claims.py): in the demo each holder has
        confirmed their own."""
        from labgov.runpod.models import TagClaim
        from labgov.runpod.tag_claims import tag_claim_confirm

        for claim in TagClaim.objects.filter(
            resource__account=account, status=TagClaim.Status.PENDING
        ).select_related("allocation__user", "allocation__funding_source"):
            # A project's allocation has no holder: its lab's admin confirms.
            person = claim.allocation.user or (
                User.objects.filter(
                    memberships__lab_id=claim.allocation.funding_source.lab_id,
                    memberships__role=Role.LAB_ADMIN,
                )
                .order_by("pk")
                .first()
            )
            if person is not None:
                tag_claim_confirm(actor=person, claim=claim)

    def _utilization_history(self, account, url: str) -> None:
        """The utilization labgov would have sampled had it been polling the simulator for
        the last HISTORY_HOURS (every HISTORY_STEP), so the demo's running-idle pod has its
        alert and right-sizing has days to go on from the first page, not two hours after
        the first sync; likewise the always-on workers of its endpoints, so the one serving
        nothing all day has its idle-workers alert. Samples and readings are idempotent:
        seeding again writes the same rows."""
        import httpx

        from labgov.runpod.models import Resource, ResourceKind
        from labgov.runpod.parsing import decode_json, parse_pods
        from labgov.utilization.recording import samples_record

        base = url.rstrip("/")
        now = timezone.now().replace(second=0, microsecond=0)
        moment = now - dt.timedelta(hours=HISTORY_HOURS)
        moment = moment.replace(minute=moment.minute - moment.minute % 5)
        written = readings = 0
        always_on = {
            runpod_id
            for runpod_id, details in Resource.objects.present()
            .filter(account=account, kind=ResourceKind.SERVERLESS)
            .values_list("runpod_id", "details")
            if (details or {}).get("workers_min")
        }
        with httpx.Client(timeout=10, headers={"Authorization": "Bearer sim-key"}) as client:
            while moment < now:
                answer = client.post(f"{base}/_sim/pods-at", json={"at": moment.isoformat()})
                if answer.status_code != 200:
                    self.stdout.write(
                        self.style.WARNING(
                            f"No utilization history: the simulator answered {answer.status_code}."
                        )
                    )
                    return
                pods = parse_pods(decode_json(answer.content))
                written += samples_record(account=account, pods=pods, now=moment)[
                    "utilization_samples"
                ]
                readings += self._worker_history_at(client, base, account, moment, always_on)
                moment += HISTORY_STEP
        self.stdout.write(
            f"Recorded {written} utilization samples and {readings} readings of always-on "
            f"workers of the last {HISTORY_HOURS} h."
        )

    def _worker_history_at(self, client, base: str, account, moment, always_on) -> int:
        """The always-on workers of the account's endpoints at `moment`, as the sync reads
        them (one reading per endpoint that keeps some), so an endpoint serving nothing all
        day has its idle-workers alert at once."""
        from labgov.runpod.parsing import decode_json, parse_worker_summary
        from labgov.utilization.recording import worker_readings_record

        answer = client.post(f"{base}/_sim/endpoint-workers-at", json={"at": moment.isoformat()})
        if answer.status_code != 200:
            return 0
        workers = {
            runpod_id: parse_worker_summary(listed)
            for runpod_id, listed in decode_json(answer.content)["endpoints"].items()
            if runpod_id in always_on
        }
        return worker_readings_record(account=account, workers=workers, now=moment)[
            "worker_readings"
        ]

    def _claim_stopped_pod(self, account) -> None:
        """Journey 3 in the demo: Pia claims Kim's forgotten annotation pod from the
        unattributed queue, so its stopped-but-billing alert is on the Vision lab's pages."""
        from labgov.alerts.evaluation import alerts_evaluate
        from labgov.runpod.models import Resource
        from labgov.runpod.services import resource_assign

        pod = Resource.objects.filter(
            account=account, kind="pod", name="vision-annotate", current_allocation__isnull=True
        ).first()
        allocation = Allocation.objects.filter(
            user__username="kim", funding_source__lab__slug="vision"
        ).first()
        if pod is None or allocation is None:
            return
        pia = User.objects.get(username="pia")
        resource_assign(actor=pia, resource=pod, allocation=allocation, note="Kim's annotation pod")
        alerts_evaluate(institution_id=account.institution_id)
        self._open_retention_case(pia, pod)

    def _open_retention_case(self, pia, pod) -> None:
        """Journey 4 in the demo: the institution's default retention policy (turned on) and a
        case Pia opened for the forgotten pod's volume disk, waiting for her decision."""
        from labgov.retention.evaluation import retention_evaluate
        from labgov.retention.services import case_open_for_resource, policy_save

        institution = pod.account.institution
        policy_save(
            actor=User.objects.get(username="ada"),
            institution=institution,
            lab=None,
            values={
                "is_active": True,
                "funding_grace_days": 7,
                "membership_grace_days": 30,
                "idle_grace_days": 90,
                "include_stopped_pod_disks": True,
                "warning_days": "30,7,1",
                "approvers_required": 1,
            },
        )
        case_open_for_resource(actor=pia, resource=pod, note="Kim's annotation pod, stopped.")
        retention_evaluate(institution_id=institution.pk)

    @transaction.atomic
    def _seed(self) -> dict:
        today = timezone.now().date()
        institution = institution_create(actor=None, name="Northfield University", slug=DEMO_SLUG)
        labs = {
            "vision": lab_create(
                actor=None,
                institution=institution,
                name="Vision Lab",
                slug="vision",
                department="Computer Science",
            ),
            "nlp": lab_create(
                actor=None,
                institution=institution,
                name="NLP Group",
                slug="nlp",
                department="Linguistics",
            ),
            "dl-course": lab_create(
                actor=None,
                institution=institution,
                name="CS 4780 Deep Learning",
                slug="dl-course",
                kind=Lab.Kind.COURSE,
                department="Computer Science",
            ),
        }
        users = {}
        for username, first, last, role, lab_slug in PEOPLE:
            user = User.objects.create_user(
                username=username,
                password=DEMO_PASSWORD,
                first_name=first,
                last_name=last,
                email=f"{username}@northfield.example",
                is_staff=role is None,
                is_superuser=role is None,
            )
            users[username] = user
            if role in (Role.INSTITUTION_ADMIN, Role.FINANCE):
                membership_grant(actor=None, user=user, role=role, institution=institution)
            elif role is not None:
                membership_grant(actor=None, user=user, role=role, lab=labs[lab_slug])
        # The course ends at the end of term.
        term_end = today + dt.timedelta(days=45)
        ada = users["ada"]

        nsf = funding_source_create(
            actor=ada,
            lab=labs["vision"],
            name="Robust perception for field robots",
            sponsor="National Science Foundation",
            award_number="NSF-2231457",
            cost_center="CS-4410-VISION",
            start_date=today - dt.timedelta(days=300),
            end_date=today + dt.timedelta(days=25),
            amount_usd=Decimal("60000.00"),
            indirect_cost_rate_percent=Decimal("55.00"),
        )
        onr = funding_source_create(
            actor=ada,
            lab=labs["vision"],
            name="Sim-to-real transfer",
            sponsor="Office of Naval Research",
            award_number="ONR-N00014-25-1-2077",
            cost_center="CS-4410-ONR",
            start_date=today - dt.timedelta(days=120),
            end_date=today + dt.timedelta(days=600),
            amount_usd=Decimal("150000.00"),
            indirect_cost_rate_percent=Decimal("55.00"),
        )
        nlp_budget = funding_source_create(
            actor=ada,
            lab=labs["nlp"],
            name="NLP shared compute budget",
            kind=FundingSource.Kind.LAB_BUDGET,
            cost_center="LING-2210",
            start_date=today.replace(month=1, day=1),
            end_date=today.replace(month=12, day=31),
            amount_usd=Decimal("25000.00"),
        )
        nih = funding_source_create(
            actor=ada,
            lab=labs["nlp"],
            name="Clinical note summarisation",
            sponsor="National Institutes of Health",
            award_number="NIH-R01-LM014321",
            cost_center="LING-2210-NIH",
            start_date=today - dt.timedelta(days=200),
            end_date=today + dt.timedelta(days=900),
            amount_usd=Decimal("90000.00"),
            indirect_cost_rate_percent=Decimal("61.50"),
        )
        course = funding_source_create(
            actor=ada,
            lab=labs["dl-course"],
            name="CS 4780 course GPU budget",
            kind=FundingSource.Kind.COURSE_BUDGET,
            cost_center="CS-TEACH-4780",
            start_date=today - dt.timedelta(days=60),
            end_date=term_end,
            amount_usd=Decimal("4000.00"),
        )
        alloc = {}
        alloc["sam"] = allocation_create(
            actor=users["pia"],
            funding_source=nsf,
            user=users["sam"],
            cap_usd=Decimal("20000"),
            start_date=nsf.start_date,
            end_date=nsf.end_date,
        )
        alloc["kim"] = allocation_create(
            actor=users["pia"],
            funding_source=onr,
            user=users["kim"],
            cap_usd=Decimal("40000"),
            start_date=onr.start_date,
            end_date=onr.end_date,
        )
        allocation_create(
            actor=users["pia"],
            funding_source=onr,
            user=users["sam"],
            project_name="sim2real ablations",
            cap_usd=Decimal("15000"),
            start_date=onr.start_date,
            end_date=onr.end_date,
        )
        alloc["raj"] = allocation_create(
            actor=users["lee"],
            funding_source=nih,
            user=users["raj"],
            cap_usd=Decimal("30000"),
            start_date=nih.start_date,
            end_date=nih.end_date,
        )
        allocation_create(
            actor=users["lee"],
            funding_source=nlp_budget,
            project_name="Shared eval runs",
            cap_usd=Decimal("5000"),
            start_date=nlp_budget.start_date,
            end_date=nlp_budget.end_date,
        )
        alloc["tara"] = allocation_create(
            actor=users["ada"],
            funding_source=course,
            user=users["tara"],
            cap_usd=Decimal("150"),
            start_date=course.start_date,
            end_date=course.end_date,
        )
        # The simulator's default scenario tags its pods `LABGOV_ALLOCATION=lga-demo-<n>`, the
        # n-th allocation made above. Real tag codes are random (new_tag_code); only the demo
        # institution's are fixed, so the scenario's pods find their payers.
        demo = Allocation.objects.filter(funding_source__institution=institution).order_by("pk")
        for n, pk in enumerate(demo.values_list("pk", flat=True), start=1):
            Allocation.objects.filter(pk=pk).update(tag_code=f"lga-demo-{n}")
        return users

    def _print_logins(self) -> None:
        self.stdout.write(f"\nDemo logins (password for all: {DEMO_PASSWORD}):")
        roles = {
            None: "superuser (Django admin)",
            Role.INSTITUTION_ADMIN: "institution admin",
            Role.FINANCE: "finance",
            Role.LAB_ADMIN: "lab admin",
            Role.MEMBER: "member",
        }
        for username, first, last, role, lab_slug in PEOPLE:
            where = f" of {lab_slug}" if lab_slug else ""
            self.stdout.write(f"  {username:<6} {first} {last}: {roles[role]}{where}")
