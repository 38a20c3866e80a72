"""The REST API v1: thin views over the selectors and services the pages use, with the
pages' access rules (labgov/accounts/access.py): outside one's scope is a 404, visible but
not allowed a 403."""

import datetime as dt

from django.db.models import Exists, OuterRef, Prefetch
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action, api_view, permission_classes
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab, Membership
from labgov.alerts import selectors as alert_selectors
from labgov.alerts import services as alert_services
from labgov.api import filters, serializers
from labgov.api.pagination import (
    LedgerPagination,
    MonthlySpendPagination,
    PagePagination,
    SpendPagination,
)
from labgov.api.permissions import TokenScopeAllows
from labgov.api.problems import NOT_FOUND, problem
from labgov.api.throttling import TokenScopedRateThrottle
from labgov.core.errors import DomainError
from labgov.core.periods import UTC
from labgov.funding.models import Allocation, FundingSource, LedgerEntry
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.notifications.models import Notification
from labgov.provisioning.forms import RequestForm
from labgov.provisioning.selectors import (
    allocations_for_requester,
    gpu_catalog,
    request_for_user,
    requests_for_user,
)
from labgov.provisioning.services import (
    request_approve,
    request_deny,
    request_save,
    request_submit,
)
from labgov.retention.models import RetentionCase
from labgov.runpod.models import Assignment, RunpodAccount
from labgov.runpod.selectors import account_for_user, allocations_assignable_by, resources_for_user
from labgov.runpod.services import resource_assign, sync_request
from labgov.usage.models import DailySpend, MonthlySpend


class ApiViewSet(viewsets.GenericViewSet):
    permission_classes = [IsAuthenticated, TokenScopeAllows]
    throttle_classes = [TokenScopedRateThrottle]
    pagination_class = PagePagination
    filter_backends = [DjangoFilterBackend, OrderingFilter]
    ordering_fields = ["id"]
    lookup_value_converter = "int"

    @property
    def throttle_scope(self) -> str:
        return "api_read" if self.request.method in ("GET", "HEAD", "OPTIONS") else "api_write"


class ReadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    pass


class InstitutionViewSet(ReadViewSet):
    """Institutions you hold a role in. Everyone signed in; others' are 404."""

    serializer_class = serializers.InstitutionSerializer

    def get_queryset(self):
        return (
            Institution.objects.filter(access.institutions_q(self.request.user))
            .distinct()
            .order_by("name", "id")
        )


class LabViewSet(ReadViewSet):
    """Labs you see: all of your institution for its admins and finance, your own labs
    otherwise."""

    serializer_class = serializers.LabSerializer
    filterset_class = filters.LabFilter

    def get_queryset(self):
        return Lab.objects.filter(access.labs_q(self.request.user)).order_by("name", "id")


class MembershipViewSet(ReadViewSet):
    """Roles: institution admins see all of their institution, finance its lab roles, lab
    admins their labs', and everyone their own."""

    serializer_class = serializers.MembershipSerializer
    filterset_class = filters.MembershipFilter

    def get_queryset(self):
        return (
            Membership.objects.filter(access.memberships_q(self.request.user))
            .select_related("user")
            .order_by("id")
        )


class FundingSourceViewSet(ReadViewSet):
    """Funding sources with allocated, committed, spent and remaining money: institution
    admins and finance see the institution's, lab admins their labs'."""

    serializer_class = serializers.FundingSourceSerializer
    filterset_class = filters.FundingSourceFilter

    def get_queryset(self):
        return (
            FundingSource.objects.visible_to(self.request.user)
            .with_figures()
            .order_by("end_date", "id")
        )


class AllocationViewSet(ReadViewSet):
    """Allocations with committed, spent and remaining money: those of the funding sources
    you see, and your own."""

    serializer_class = serializers.AllocationSerializer
    filterset_class = filters.AllocationFilter

    def get_queryset(self):
        return (
            Allocation.objects.visible_to(self.request.user)
            .select_related("funding_source")
            .with_figures()
            .order_by("end_date", "id")
        )


class LedgerEntryViewSet(ReadViewSet):
    """The append-only ledger of the funding sources you see and of your own allocations.
    Cursor-paged (newest first by default)."""

    serializer_class = serializers.LedgerEntrySerializer
    filterset_class = filters.LedgerFilter
    filter_backends = [DjangoFilterBackend]
    pagination_class = LedgerPagination

    def get_queryset(self):
        return LedgerEntry.objects.filter(access.ledger_entries_q(self.request.user))


class RunpodAccountViewSet(ReadViewSet):
    """Connected Runpod accounts (never their keys): institution admins and finance see the
    institution's, lab admins their lab's own and the shared ones."""

    serializer_class = serializers.RunpodAccountSerializer
    filterset_class = filters.AccountFilter

    def get_queryset(self):
        return RunpodAccount.objects.filter(access.runpod_accounts_q(self.request.user)).order_by(
            "name", "id"
        )

    @extend_schema(request=None, responses={202: serializers.SyncQueuedSerializer})
    @action(detail=True, methods=["post"])
    def sync(self, request, pk=None):
        """Queue a sync now. Institution admins only (others who see the account: 403)."""
        account = account_for_user(request.user, int(pk), manage=True)
        sync_request(actor=request.user, account=account)
        return Response({"account": account.pk, "queued": True}, status=status.HTTP_202_ACCEPTED)


class ResourceViewSet(ReadViewSet):
    """Pods, network volumes, serverless endpoints and clusters, each with its attribution
    timeline: the institution's for its admins and finance; for lab admins what their labs
    pay for, their lab accounts' and the unattributed ones of shared accounts; for members
    what they pay for."""

    serializer_class = serializers.ResourceSerializer
    filterset_class = filters.ResourceFilter

    def get_queryset(self):
        return (
            resources_for_user(self.request.user)
            .prefetch_related(
                Prefetch("assignments", queryset=Assignment.objects.order_by("starts_at", "id"))
            )
            .order_by("id")
        )

    @extend_schema(request=serializers.AssignSerializer, responses=serializers.ResourceSerializer)
    @action(detail=True, methods=["post"])
    def assign(self, request, pk=None):
        """Have an allocation pay for the resource from now on (its whole open history when
        it had none). Lab admins (their labs' allocations) and institution admins."""
        resource = access.get_or_404(resources_for_user(request.user), pk=int(pk))
        allocations = allocations_assignable_by(request.user)
        access.deny_unless(allocations.exists())
        body = serializers.AssignSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        allocation = allocations.filter(pk=body.validated_data["allocation"]).first()
        if allocation is None:
            raise ValidationError({"allocation": ["Choose an allocation of a lab you manage."]})
        resource_assign(actor=request.user, resource=resource, allocation=allocation)
        return Response(self.get_serializer(self.get_queryset().get(pk=resource.pk)).data)


class SpendViewSet(mixins.ListModelMixin, ApiViewSet):
    """Daily spend per account, category and allocation (with its funding source, lab and
    person). Institution admins and finance see the institution's, lab admins their labs',
    members their own. Cursor-paged; `start` included, `end` excluded."""

    serializer_class = serializers.SpendSerializer
    filterset_class = filters.DailySpendFilter
    filter_backends = [DjangoFilterBackend]
    pagination_class = SpendPagination

    def get_queryset(self):
        return DailySpend.objects.filter(access.spend_q(self.request.user))


class MonthlySpendViewSet(SpendViewSet):
    """Monthly spend, like the daily one; a month is its first day."""

    serializer_class = serializers.MonthlySpendSerializer
    filterset_class = filters.MonthlySpendFilter
    pagination_class = MonthlySpendPagination

    def get_queryset(self):
        return MonthlySpend.objects.filter(access.spend_q(self.request.user))


class AlertViewSet(ReadViewSet):
    """Alerts: the institution's for its admins and finance, their labs' for lab admins, and
    those about one's own resources and allocations. Acting on one: its lab's admins and the
    institution's admins (others who see it: 403)."""

    serializer_class = serializers.AlertSerializer
    filterset_class = filters.AlertFilter

    def get_queryset(self):
        return alert_selectors.alerts_for_user(self.request.user).order_by("-id")

    def _alert(self, pk):
        return alert_selectors.alert_for_user(self.request.user, int(pk))

    @extend_schema(request=None, responses=serializers.AlertSerializer)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request, pk=None):
        """Acknowledge: nobody is told again unless it gets worse."""
        alert = alert_services.alert_acknowledge(actor=request.user, alert=self._alert(pk))
        return Response(self.get_serializer(alert).data)

    @extend_schema(request=serializers.SnoozeSerializer, responses=serializers.AlertSerializer)
    @action(detail=True, methods=["post"])
    def snooze(self, request, pk=None):
        """Snooze until a day (at most 90 days ahead)."""
        alert = self._alert(pk)
        body = serializers.SnoozeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        until = dt.datetime.combine(body.validated_data["until"], dt.time(), tzinfo=UTC)
        alert = alert_services.alert_snooze(actor=request.user, alert=alert, until=until)
        return Response(self.get_serializer(alert).data)

    @extend_schema(request=serializers.ResolveSerializer, responses=serializers.AlertSerializer)
    @action(detail=True, methods=["post"])
    def resolve(self, request, pk=None):
        """Resolve by hand; if the condition still holds, a new alert opens."""
        alert = self._alert(pk)
        body = serializers.ResolveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        note = body.validated_data.get("note", "")
        alert = alert_services.alert_resolve(actor=request.user, alert=alert, note=note)
        return Response(self.get_serializer(alert).data)


class NotificationViewSet(ReadViewSet):
    """Your own notifications."""

    serializer_class = serializers.NotificationSerializer
    filterset_class = filters.NotificationFilter

    def get_queryset(self):
        return Notification.objects.visible_to(self.request.user).order_by("-id")


def _reconciled(invoices):
    """Each invoice's `all_reconciled`: none of its lines is unreconciled (one subquery)."""
    unreconciled = InvoiceLine.objects.filter(invoice=OuterRef("pk"), reconciled=False)
    return invoices.annotate(all_reconciled=~Exists(unreconciled))


class InvoiceViewSet(ReadViewSet):
    """Invoices, newest period first: the institution's for its admins and finance, their
    labs' for lab admins (members see none: their own lines are under invoice-lines). One
    invoice comes with its lines."""

    serializer_class = serializers.InvoiceSerializer
    filterset_class = filters.InvoiceFilter

    def get_serializer_class(self):
        if self.action == "retrieve":
            return serializers.InvoiceDetailSerializer
        return serializers.InvoiceSerializer

    def get_queryset(self):
        invoices = _reconciled(Invoice.objects.visible_to(self.request.user))
        if self.action == "retrieve":
            invoices = invoices.prefetch_related(
                Prefetch("lines", queryset=InvoiceLine.objects.order_by("position"))
            )
        return invoices.order_by("-month", "id")


class InvoiceLineViewSet(ReadViewSet):
    """The lines of issued invoices charged to your own allocations (as on the My invoices
    page). Cursor-paged (newest first by default)."""

    serializer_class = serializers.InvoiceLineSerializer
    filterset_class = filters.InvoiceLineFilter
    filter_backends = [DjangoFilterBackend]
    pagination_class = LedgerPagination

    def get_queryset(self):
        return InvoiceLine.objects.filter(access.member_invoice_lines_q(self.request.user))


class RetentionCaseViewSet(ReadViewSet):
    """Retention cases of stored volumes, the soonest due first: the institution's for its
    admins and finance, their labs' for lab admins, and the ones of volumes you pay for."""

    serializer_class = serializers.RetentionCaseSerializer
    filterset_class = filters.RetentionCaseFilter

    def get_queryset(self):
        return (
            RetentionCase.objects.filter(access.retention_cases_q(self.request.user))
            .prefetch_related("holds")  # newest first (its Meta ordering)
            .order_by("due_date", "id")
        )


class ProvisioningRequestViewSet(mixins.CreateModelMixin, ReadViewSet):
    """Provisioning requests: the institution's for its admins and finance, their labs' for
    lab admins, and everyone's own."""

    serializer_class = serializers.ProvisioningRequestSerializer
    filterset_class = filters.RequestFilter

    def get_queryset(self):
        return requests_for_user(self.request.user).order_by("-id")

    def _request(self, pk):
        return request_for_user(self.request.user, int(pk))

    def _answer(self, req, code=status.HTTP_200_OK):
        return Response(self.get_serializer(self._request(req.pk)).data, status=code)

    @extend_schema(
        request=serializers.ProvisioningRequestCreateSerializer,
        responses={201: serializers.ProvisioningRequestCreatedSerializer},
    )
    def create(self, request):
        """Save a request on one of your own allocations as a draft, with its estimate; with
        `submit: true` submit it at once (a refused submission leaves the draft and says why
        in `submission_refused`). Members and lab admins with an allocation; others 403."""
        allocations = allocations_for_requester(request.user)
        access.deny_unless(allocations.exists())
        body = serializers.ProvisioningRequestCreateSerializer(data=request.data)
        body.fields["allocation"].queryset = allocations
        body.is_valid(raise_exception=True)
        data = request.data.dict() if hasattr(request.data, "dict") else dict(request.data)
        form = RequestForm(
            {**data, "allocation": body.validated_data["allocation"].pk},
            allocations=allocations,
            gpus=list(gpu_catalog()),
        )
        if not form.is_valid():
            raise ValidationError({name: list(errors) for name, errors in form.errors.items()})
        req = request_save(
            actor=request.user, allocation=form.cleaned_data["allocation"], values=form.values()
        )
        refused: list[str] = []
        if body.validated_data["submit"]:
            try:
                req = request_submit(actor=request.user, req=req)
            except DomainError as exc:
                refused = getattr(exc, "reasons", [exc.message])
        answer = serializers.ProvisioningRequestCreatedSerializer(self._request(req.pk)).data
        answer["submission_refused"] = refused
        return Response(answer, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=serializers.ProvisioningRequestSerializer)
    @action(detail=True, methods=["post"])
    def submit(self, request, pk=None):
        """Submit your own draft (approved at once when the lab's policy allows). Only the
        requester (others who see it: 403)."""
        req = self._request(pk)
        access.deny_unless(req.requester_id == request.user.pk)
        return self._answer(request_submit(actor=request.user, req=req))

    @extend_schema(request=None, responses=serializers.ProvisioningRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve a submitted request (commits its estimate; above the policy's amount a
        second, different approver completes it). The lab's admins and institution admins;
        never one's own allocation."""
        req = self._request(pk)
        access.deny_unless(access.can_review_requests(request.user, req.lab_id))
        return self._answer(request_approve(actor=request.user, req=req))

    @extend_schema(
        request=serializers.DenySerializer, responses=serializers.ProvisioningRequestSerializer
    )
    @action(detail=True, methods=["post"])
    def deny(self, request, pk=None):
        """Deny a submitted request, saying why. The lab's admins and institution admins."""
        req = self._request(pk)
        access.deny_unless(access.can_review_requests(request.user, req.lab_id))
        body = serializers.DenySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data["reason"]
        return self._answer(request_deny(actor=request.user, req=req, reason=reason))


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE"])
@permission_classes([AllowAny])
def not_found(request, *args, **kwargs):
    return problem(status.HTTP_404_NOT_FOUND, NOT_FOUND, code="not_found")


@extend_schema(exclude=True)
@api_view(["GET"])
@permission_classes([AllowAny])
def root(request):
    """The API's front door: its resources, the schema and the docs (what each holds for you
    depends on who you are; see the docs)."""
    from django.urls import reverse

    from labgov.api.urls import router

    resources = {
        prefix: request.build_absolute_uri(reverse(f"api:{basename}-list"))
        for prefix, _, basename in router.registry
    }
    return Response(
        {
            "version": "v1",
            "resources": resources,
            "schema": request.build_absolute_uri(reverse("api:schema")),
            "docs": request.build_absolute_uri(reverse("api:docs")),
            "authentication": "Authorization: Bearer <token>, made on your API tokens page: "
            + request.build_absolute_uri(reverse("api_tokens")),
        }
    )
