"""The alert rules. Each reads the institution's state in a few queries, whatever its size,
and returns findings: what is wrong now. `evaluation.py` turns findings into alerts.

Figures come from the rollups, the ledger and the inventory; only the stopped-pod rule reads
billing records, one index range per stopped pod, to confirm the disk is really billing.
"""

import datetime as dt
from collections import defaultdict
from decimal import Decimal

from django.db.models import Case, F, OuterRef, Q, Subquery, When

from labgov.alerts.balance import runways
from labgov.alerts.findings import (
    Context,
    Finding,
    _lab_and_owner,
    _resource_finding,
    _resources,
    day_words,
    usd,
)
from labgov.alerts.idle_rule import running_idle_findings
from labgov.alerts.models import Alert, Kind, Severity
from labgov.alerts.serverless_rule import idle_workers_findings
from labgov.core.money import ZERO, grouped_sums, to_cents
from labgov.dashboard.forecast import Outlook, burn_window, forecast, gap_words
from labgov.dashboard.selectors.common import now_rates
from labgov.funding.models import Allocation, FundingSource
from labgov.runpod.history import (
    Before,
    first_billed,
    history_start,
    idle_since,
    last_compute_end,
    since_words,
    stopped_at,
    volume_uses,
)
from labgov.runpod.models import BillingRecord, Resource, ResourceKind, RunpodAccount, SyncRun
from labgov.runpod.pricing import network_volume_monthly_usd, pod_storage_monthly_usd
from labgov.runpod.types import PodStatus
from labgov.usage.models import DailySpend

HOURS_PER_DAY = 24
UNATTRIBUTED_DAYS = 30
# A stopped pod's disk counts as billing when its latest billing record is this recent.
CONFIRM_WITHIN = dt.timedelta(days=2)


# -- Stopped but billing ----------------------------------------------------------------------


def stopped_pod_disks(ctx: Context) -> list[Finding]:
    """A stopped pod with a volume disk, confirmed by its billing: its latest record (within
    the last two days) charges disk and no compute, so it is really billing while stopped.
    It has been stopped since its last hour of compute in the billing history, or since
    before that history begins."""
    # Only a record of the last two days can confirm it: bounding the time lets PostgreSQL
    # read just the current month's billing partition(s), not every month of history.
    latest = BillingRecord.objects.filter(
        resource=OuterRef("pk"), bucket_start__gte=ctx.now - CONFIRM_WITHIN
    ).order_by("-bucket_start")
    pods = (
        _resources(ctx)
        .filter(kind=ResourceKind.POD, status=PodStatus.EXITED, volume_disk_gb__gt=0)
        .annotate(
            last_bucket=Subquery(latest.values("bucket_start")[:1]),
            last_disk_usd=Subquery(latest.values("disk_usd")[:1]),
            last_compute_usd=Subquery(
                latest.annotate(compute=F("gpu_usd") + F("cpu_usd")).values("compute")[:1]
            ),
        )
        .filter(last_bucket__gte=ctx.now - CONFIRM_WITHIN, last_disk_usd__gt=0)
    )
    # A standing alert already knows when its pod stopped (a pod that ran again cleared it):
    # only pods newly found read their history back to their last hour of compute.
    known = _known_stops(ctx)
    history = {
        "last_compute_at": last_compute_end(),
        "first_billed_at": first_billed(),
        "history_from": history_start(),
    }
    if known:
        fresh = ~Q(pk__in=list(known))
        history = {name: Case(When(fresh, then=value)) for name, value in history.items()}
    pods = pods.annotate(**history)
    findings = []
    for pod in pods:
        if pod.last_compute_usd:
            continue  # its latest hour still ran: it has only just stopped
        if not ctx.settings.for_lab(_lab_and_owner(pod)[0]).enabled(Kind.STOPPED_POD_DISK):
            continue
        monthly = pod_storage_monthly_usd(
            status=PodStatus.EXITED, container_disk_gb=0, volume_disk_gb=pod.volume_disk_gb
        )
        since = known.get(pod.pk) or stopped_at(
            last_compute=pod.last_compute_at,
            first_record=pod.first_billed_at,
            history_from=pod.history_from,
            status_changed_at=pod.status_changed_at,
            first_seen_at=pod.first_seen_at,
        )
        name = pod.label
        bound = isinstance(since, Before)
        stopped = f"Stopped since {since_words(since)}" if since else "Stopped"
        if bound:
            stopped += " (the start of the billing history labgov holds for this account)"
        findings.append(
            _resource_finding(
                Kind.STOPPED_POD_DISK,
                pod,
                f"Pod {name}",
                title=f"Stopped pod {name} is billing {usd(monthly)}/month for its "
                f"{pod.volume_disk_gb} GB volume disk",
                detail=f"{stopped}. A stopped pod's volume disk bills at double the running "
                f"rate ($0.20/GB/month); its latest billing records confirm it. If the data is no "
                f"longer needed, open a retention case to have the pod deleted (a second "
                f"person approves); or start it to go on working.",
                monthly_cost_usd=monthly,
                facts={
                    "runpod_id": pod.runpod_id,
                    "volume_disk_gb": pod.volume_disk_gb,
                    "stopped_at": since.isoformat() if since else None,
                    "stopped_before": bound,
                    "stopped_from": "billing",
                },
            )
        )
    return findings


def _known_stops(ctx: Context) -> dict[int, dt.datetime]:
    """Resource id → when it stopped, from the unresolved stopped-pod alerts that worked it
    out from billing."""
    rows = (
        Alert.objects.unresolved()
        .filter(institution_id=ctx.institution_id, kind=Kind.STOPPED_POD_DISK)
        .exclude(resource=None)
        .values_list("resource_id", "facts")
    )
    known = {}
    for resource_id, facts in rows:
        if facts.get("stopped_from") == "billing" and facts.get("stopped_at"):
            moment = dt.datetime.fromisoformat(facts["stopped_at"])
            known[resource_id] = Before.of(moment) if facts.get("stopped_before") else moment
    return known


def idle_network_volumes(ctx: Context) -> list[Finding]:
    """A network volume that no running pod of its account has used for N days, judged from
    the billing history fetched (hours in which a pod mounting it was billed for compute), so
    the first sync already flags volumes idle for months."""
    volumes = list(
        _resources(ctx)
        .filter(kind=ResourceKind.NETWORK_VOLUME)
        .annotate(first_billed_at=first_billed(), history_from=history_start())
    )
    if not volumes:
        return []
    in_use, last_used, observed = volume_uses(ctx.institution_id)
    findings = []
    for volume in volumes:
        key = (volume.account_id, volume.runpod_id)
        if key in in_use:
            continue
        config = ctx.settings.for_lab(_lab_and_owner(volume)[0])
        if not config.enabled(Kind.IDLE_NETWORK_VOLUME):
            continue
        since = idle_since(volume, key, last_used, observed)
        idle_days = (ctx.now - since).days
        if idle_days < config.idle_volume_days:
            continue
        bound = isinstance(since, Before)
        monthly = network_volume_monthly_usd(size_gb=volume.size_gb, volume_type=volume.volume_type)
        name = volume.label
        used = "used by a running pod" if key in last_used or key in observed else "used by a pod"
        span = f"at least {idle_days} days" if bound else f"{idle_days} days"
        findings.append(
            _resource_finding(
                Kind.IDLE_NETWORK_VOLUME,
                volume,
                f"Network volume {name}",
                title=f"Network volume {name} ({volume.size_gb} GB) has not been {used} for "
                f"{span}: {usd(monthly)}/month",
                detail=f"Network volumes bill the same whether used or not. Idle since "
                f"{since_words(since)}"
                + (
                    ", the start of the billing history labgov holds for this account"
                    if bound
                    else ""
                )
                + ". Keep it if the data is needed; otherwise plan its deletion.",
                monthly_cost_usd=monthly,
                facts={
                    "runpod_id": volume.runpod_id,
                    "size_gb": volume.size_gb,
                    "idle_since": since.isoformat(),
                    "idle_since_before": bound,
                    "idle_days": idle_days,
                },
            )
        )
    return findings


# -- Budgets ----------------------------------------------------------------------------------


def _money_holders(ctx: Context):
    sources = list(
        FundingSource.objects.filter(institution_id=ctx.institution_id)
        .exclude(status=FundingSource.Status.CLOSED)
        .with_figures()
    )
    allocations = list(
        Allocation.objects.filter(funding_source__institution_id=ctx.institution_id)
        .exclude(funding_source__status=FundingSource.Status.CLOSED)
        .select_related("funding_source", "user")
        # What the budget rules read (_holder_facts, forecasts): a thousand allocations with
        # their source and person cost half as much to load without the columns nobody reads.
        .only(
            "funding_source_id",
            "user_id",
            "project_name",
            "cap_usd",
            "start_date",
            "end_date",
            "funding_source__name",
            "funding_source__lab_id",
            "funding_source__status",
            "user__username",
            "user__first_name",
            "user__last_name",
        )
        .with_figures()
    )
    return sources, allocations


def _holder_facts(holder) -> tuple[str, str, Decimal, int, int | None, int | None, int | None]:
    """(subject key, label, amount, lab id, funding source id, allocation id, owner id)"""
    if isinstance(holder, FundingSource):
        return (
            f"funding_source:{holder.pk}",
            holder.name,
            holder.amount_usd,
            holder.lab_id,
            holder.pk,
            None,
            None,
        )
    return (
        f"allocation:{holder.pk}",
        f"{holder.holder_name} on {holder.funding_source.name}",
        holder.cap_usd,
        holder.funding_source.lab_id,
        holder.funding_source_id,
        holder.pk,
        holder.user_id,
    )


def budget_thresholds(ctx: Context, holders) -> list[Finding]:
    findings = []
    for holder in holders:
        key, label, amount, lab_id, fs_id, alloc_id, owner_id = _holder_facts(holder)
        config = ctx.settings.for_lab(lab_id)
        if amount <= 0 or not config.enabled(Kind.BUDGET_THRESHOLD):
            continue
        used = holder.committed_usd + holder.spent_usd
        percent = used * 100 / amount
        crossed = [t for t in config.budget_thresholds if percent >= t]
        if not crossed:
            continue
        level = max(crossed)
        severity = (
            Severity.CRITICAL
            if level >= 100
            else Severity.WARNING
            if level >= 80
            else Severity.INFO
        )
        findings.append(
            Finding(
                kind=Kind.BUDGET_THRESHOLD,
                subject_key=key,
                subject_label=label,
                lab_id=lab_id,
                owner_id=owner_id,
                funding_source_id=fs_id,
                allocation_id=alloc_id,
                severity=severity,
                level=level,
                title=f"{label}: {percent:.0f}% committed or spent (past {level}%)",
                detail=f"{usd(used)} of {usd(amount)}: {usd(holder.committed_usd)} committed "
                f"and {usd(holder.spent_usd)} spent; {usd(amount - used)} left.",
                facts={"percent": f"{percent:.1f}", "used_usd": str(to_cents(used))},
            )
        )
    return findings


def forecast_overruns(ctx: Context, sources, allocations) -> list[Finding]:
    first, last = burn_window(ctx.today)
    spend = DailySpend.objects.filter(
        institution_id=ctx.institution_id, day__gte=first, day__lte=last
    )
    burns = {
        "funding_source": {
            k[0]: v for k, v in grouped_sums(spend, ["funding_source_id"], "amount_usd").items()
        },
        "allocation": {
            k[0]: v for k, v in grouped_sums(spend, ["allocation_id"], "amount_usd").items()
        },
    }
    # What runs and is stored now on each holder's money: pods started today have no spend
    # in the last 7 days yet, and the alert goes by the earlier run-out of the two rates.
    now = now_rates(Q(account__institution_id=ctx.institution_id, account__is_active=True))
    now_by = {"funding_source": now.by_source, "allocation": now.by_allocation}
    findings = []
    for holder in [*sources, *allocations]:
        key, label, amount, lab_id, fs_id, alloc_id, owner_id = _holder_facts(holder)
        if not ctx.settings.for_lab(lab_id).enabled(Kind.FORECAST_OVERRUN):
            continue
        kind_key = "funding_source" if alloc_id is None else "allocation"
        weekly = burns[kind_key].get(holder.pk, ZERO)
        rate = weekly / 7
        outlook = forecast(
            remaining_usd=holder.remaining_usd,
            burn_rate_usd=rate,
            today=ctx.today,
            end_date=holder.end_date,
            now_rate_usd=now_by[kind_key].get(holder.pk, ZERO),
        )
        if outlook.outlook != Outlook.RUNS_OUT_EARLY or not outlook.days_before_end:
            continue
        basis = (
            f"what runs and is stored on it now ({usd(outlook.now_rate_usd)}/day)"
            if outlook.by_now_rate
            else f"the last 7 days' rate ({usd(rate)}/day)"
        )
        findings.append(
            Finding(
                kind=Kind.FORECAST_OVERRUN,
                subject_key=key,
                subject_label=label,
                lab_id=lab_id,
                owner_id=owner_id,
                funding_source_id=fs_id,
                allocation_id=alloc_id,
                severity=Severity.WARNING,
                title=f"{label} runs out on {day_words(outlook.run_out_date)}, "
                f"{gap_words(outlook.days_before_end)} before it ends, at {basis}",
                detail=f"Burn rate {usd(rate)}/day over the last 7 days; what runs and is "
                f"stored on it now costs {usd(outlook.now_rate_usd)}/day. "
                f"{outlook.headline}. {usd(holder.remaining_usd)} left; ends "
                f"{day_words(holder.end_date)}.",
                facts={
                    "run_out_date": outlook.run_out_date.isoformat(),
                    "burn_rate_usd_per_day": str(to_cents(rate)),
                    "now_rate_usd_per_day": str(to_cents(outlook.now_rate_usd)),
                    "by_now_rate": outlook.by_now_rate,
                },
            )
        )
    return findings


# -- Funding ending with data -----------------------------------------------------------------


def _storage_monthly(resource: Resource) -> tuple[int, Decimal]:
    """(GB, $/month it will cost once nothing runs)."""
    if resource.kind == ResourceKind.NETWORK_VOLUME:
        return resource.size_gb, network_volume_monthly_usd(
            size_gb=resource.size_gb, volume_type=resource.volume_type
        )
    return resource.volume_disk_gb, pod_storage_monthly_usd(
        status=PodStatus.EXITED, container_disk_gb=0, volume_disk_gb=resource.volume_disk_gb
    )


def funding_ending(ctx: Context, sources) -> list[Finding]:
    horizon_days = {s.pk: ctx.settings.for_lab(s.lab_id) for s in sources}
    ending = {
        s.pk: s
        for s in sources
        if horizon_days[s.pk].enabled(Kind.FUNDING_ENDING)
        and (s.end_date - ctx.today).days <= horizon_days[s.pk].funding_ending_days
    }
    if not ending:
        return []
    volumes = defaultdict(list)
    storage = _resources(ctx).filter(
        Q(kind=ResourceKind.NETWORK_VOLUME) | Q(kind=ResourceKind.POD, volume_disk_gb__gt=0),
        current_allocation__funding_source_id__in=ending,
    )
    for resource in storage:
        volumes[resource.current_allocation.funding_source_id].append(resource)
    findings = []
    for fs_id, held in volumes.items():
        source = ending[fs_id]
        sized = [(r, *_storage_monthly(r)) for r in held]
        total_gb = sum(gb for _, gb, _ in sized)
        monthly = sum((m for _, _, m in sized), ZERO)
        days = (source.end_date - ctx.today).days
        when = (
            f"ended {gap_words(-days)} ago"
            if days < 0
            else "ends today"
            if days == 0
            else f"ends in {gap_words(days)}"
        )
        findings.append(
            Finding(
                kind=Kind.FUNDING_ENDING,
                subject_key=f"funding_source:{fs_id}",
                subject_label=source.name,
                lab_id=source.lab_id,
                funding_source_id=fs_id,
                severity=Severity.CRITICAL if days < 0 else Severity.WARNING,
                title=f"{source.name} {when} ({day_words(source.end_date)}) with "
                f"{total_gb:,} GB of volumes on it ({usd(monthly)}/month)",
                detail="Decide for each volume: keep it on other money, or delete it once its "
                "data is saved elsewhere. Volumes: "
                + "; ".join(f"{r.label} ({gb} GB, {usd(m)}/month)" for r, gb, m in sized),
                monthly_cost_usd=monthly,
                facts={
                    "end_date": source.end_date.isoformat(),
                    "volumes": [
                        {"id": r.pk, "name": r.label, "gb": gb, "monthly_usd": str(m)}
                        for r, gb, m in sized
                    ],
                },
            )
        )
    return findings


# -- Accounts ---------------------------------------------------------------------------------


def _accounts(ctx: Context) -> list[RunpodAccount]:
    return list(
        RunpodAccount.objects.filter(institution_id=ctx.institution_id, is_active=True).defer(
            "api_key_encrypted"
        )
    )


def _spend_per_account(ctx: Context, **filters) -> dict[int, Decimal]:
    """The institution's daily rollups matching `filters`, summed per Runpod account."""
    rollups = DailySpend.objects.filter(institution_id=ctx.institution_id, **filters)
    return {k[0]: v for k, v in grouped_sums(rollups, ["account_id"], "amount_usd").items()}


def balance_risks(ctx: Context, accounts: list[RunpodAccount]) -> list[Finding]:
    """One alert per account whose balance runs out within N days, for its lab (or the
    institution); and one for each other lab whose pods there would lose their data, so that
    lab's admins and the pods' owners see it and are told."""
    findings = []
    known = runways(accounts, ctx.today)
    for account in accounts:
        runway = known.get(account.pk)
        if runway is None or runway.days_left is None:
            continue
        at_risk = list(
            Resource.objects.present()
            .filter(account=account, kind=ResourceKind.POD, network_volume_id="")
            .exclude(status=PodStatus.TERMINATED)
            .order_by("name")
            .values_list(
                "pk",
                "name",
                "runpod_id",
                "status",
                "current_allocation__funding_source__lab_id",
                "current_allocation__funding_source__lab__name",
            )
        )
        findings += _balance_findings(ctx, account, runway, at_risk)
    return findings


def _balance_findings(ctx, account, runway, at_risk) -> list[Finding]:
    days_left = runway.days_left
    by_lab: dict[int, list] = defaultdict(list)
    lab_names: dict[int, str] = {}
    for pod in at_risk:
        if pod[4] is not None and pod[4] != account.lab_id:
            by_lab[pod[4]].append(pod)
            lab_names[pod[4]] = pod[5]
    subjects = [
        (account.lab_id, f"account:{account.pk}", f"Runpod account {account.name}", at_risk)
    ]
    subjects += [
        (
            lab_id,
            f"account:{account.pk}:lab:{lab_id}",
            f"Runpod account {account.name}: pods of {lab_names[lab_id]}",
            pods,
        )
        for lab_id, pods in sorted(by_lab.items())
    ]
    findings = []
    for lab_id, key, label, pods in subjects:
        config = ctx.settings.for_lab(lab_id)
        if not config.enabled(Kind.BALANCE_RISK) or days_left >= config.balance_days:
            continue
        names = ", ".join(name or runpod_id for _, name, runpod_id, *_ in pods)
        severity = (
            Severity.CRITICAL if days_left < min(2, config.balance_days) else Severity.WARNING
        )
        whose = "" if key == f"account:{account.pk}" else f" of {lab_names[lab_id]}"
        findings.append(
            Finding(
                kind=Kind.BALANCE_RISK,
                subject_key=key,
                subject_label=label,
                lab_id=lab_id,
                account_id=account.pk,
                severity=severity,
                title=f"Runpod account {account.name}: {usd(runway.balance_usd)} lasts "
                f"{runway.words} at {usd(runway.daily_usd)}/day",
                detail=f"Balance {usd(runway.balance_usd)} ({runway.source}). At $0 Runpod "
                f"stops every pod and terminates the {len(pods)}{whose} without a network "
                f"volume; their data cannot be recovered"
                + (f": {names}." if names else ".")
                + " Add credit, or move data that matters to a network volume.",
                facts={
                    "balance_usd": str(runway.balance_usd),
                    "days_left": f"{days_left:.2f}",
                    "pods_at_risk": [
                        {"id": pk, "name": name or rid, "status": status}
                        for pk, name, rid, status, *_ in pods
                    ],
                },
            )
        )
    return findings


def unattributed_spend(ctx: Context, accounts: list[RunpodAccount]) -> list[Finding]:
    first = ctx.today - dt.timedelta(days=UNATTRIBUTED_DAYS)
    sums = _spend_per_account(ctx, allocation__isnull=True, day__gte=first)
    findings = []
    for account in accounts:
        config = ctx.settings.for_lab(account.lab_id)
        amount = sums.get(account.pk, ZERO)
        if not config.enabled(Kind.UNATTRIBUTED_SPEND):
            continue
        if amount <= config.unattributed_threshold_usd:
            continue
        findings.append(
            Finding(
                kind=Kind.UNATTRIBUTED_SPEND,
                subject_key=f"account:{account.pk}",
                subject_label=f"Runpod account {account.name}",
                lab_id=account.lab_id,
                account_id=account.pk,
                severity=Severity.WARNING,
                title=f"{usd(amount)} of spend on {account.name} in the last "
                f"{UNATTRIBUTED_DAYS} days is not attributed to anyone",
                detail=f"Above the threshold of {usd(config.unattributed_threshold_usd)}. "
                "Assign the resources in the unattributed queue, or add a rule.",
                monthly_cost_usd=to_cents(amount),
                facts={"amount_usd": str(amount)},
            )
        )
    return findings


def sync_failures(ctx: Context, accounts: list[RunpodAccount]) -> list[Finding]:
    findings = []
    for account in accounts:
        config = ctx.settings.for_lab(account.lab_id)
        if not config.enabled(Kind.SYNC_FAILING):
            continue
        runs = SyncRun.objects.filter(account=account)
        last_failure = runs.filter(status=SyncRun.Status.FAILED).first()
        if last_failure is None:
            continue
        last_success = runs.filter(status=SyncRun.Status.SUCCEEDED).first()
        if last_success is not None and last_success.started_at > last_failure.started_at:
            continue
        if last_success is not None:
            since = last_success.finished_at or last_success.started_at
        else:
            since = runs.order_by("started_at").first().started_at
        hours = (ctx.now - since).total_seconds() / 3600
        if hours < config.sync_failing_hours:
            continue
        severity = Severity.CRITICAL if hours >= 4 * config.sync_failing_hours else Severity.WARNING
        last_ok = f"last success {since:%Y-%m-%d %H:%M} UTC" if last_success else "never synced"
        findings.append(
            Finding(
                kind=Kind.SYNC_FAILING,
                subject_key=f"account:{account.pk}",
                subject_label=f"Runpod account {account.name}",
                lab_id=account.lab_id,
                account_id=account.pk,
                severity=severity,
                title=f"Sync of {account.name} has been failing for {hours:.0f} hours",
                detail=f"Spend and alerts are out of date ({last_ok}). Latest error: "
                f"{last_failure.error or 'none recorded'}",
                facts={"since": since.isoformat(), "last_error": last_failure.error[:500]},
            )
        )
    return findings


def findings_for(ctx: Context) -> list[Finding]:
    sources, allocations = _money_holders(ctx)
    accounts = _accounts(ctx)
    return [
        *stopped_pod_disks(ctx),
        *idle_network_volumes(ctx),
        *budget_thresholds(ctx, [*sources, *allocations]),
        *forecast_overruns(ctx, sources, allocations),
        *funding_ending(ctx, sources),
        *balance_risks(ctx, accounts),
        *unattributed_spend(ctx, accounts),
        *sync_failures(ctx, accounts),
        *running_idle(ctx),
        *idle_workers_findings(ctx),
    ]


def running_idle(ctx: Context) -> list[Finding]:
    return running_idle_findings(ctx)
