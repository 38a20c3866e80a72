from csp.constants import SELF
from csp.decorators import csp_update
from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from labgov.api import views
from labgov.api.docs import DocsView, SchemaView

app_name = "api"

# Path converters (not regexes): ids are <int:pk>, so a URL's shape is checked before any view.
router = SimpleRouter(use_regex_path=False)
router.register("institutions", views.InstitutionViewSet, basename="institution")
router.register("labs", views.LabViewSet, basename="lab")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("funding-sources", views.FundingSourceViewSet, basename="funding-source")
router.register("allocations", views.AllocationViewSet, basename="allocation")
router.register("ledger-entries", views.LedgerEntryViewSet, basename="ledger-entry")
router.register("provisioning-requests", views.ProvisioningRequestViewSet, basename="request")
router.register("runpod-accounts", views.RunpodAccountViewSet, basename="runpod-account")
router.register("resources", views.ResourceViewSet, basename="resource")
router.register("spend/daily", views.SpendViewSet, basename="spend-daily")
router.register("spend/monthly", views.MonthlySpendViewSet, basename="spend-monthly")
router.register("alerts", views.AlertViewSet, basename="alert")
router.register("notifications", views.NotificationViewSet, basename="notification")
router.register("invoices", views.InvoiceViewSet, basename="invoice")
router.register("invoice-lines", views.InvoiceLineViewSet, basename="invoice-line")
router.register("retention-cases", views.RetentionCaseViewSet, basename="retention-case")

urlpatterns = [
    path("", views.root, name="root"),
    path("schema/", SchemaView.as_view(), name="schema"),
    # Swagger UI's stylesheet draws its icons as data: SVG images; images cannot run script,
    # so this one page also allows them. Its scripts and styles stay 'self' only.
    path(
        "docs/",
        csp_update({"img-src": [SELF, "data:"]})(DocsView.as_view(url_name="api:schema")),
        name="docs",
    ),
    *router.urls,
    re_path(r"^.*$", views.not_found),
]

__all__ = ["SpectacularAPIView"]
