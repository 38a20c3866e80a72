from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from labgov.accounts.oidc import CallbackView, SignInView
from labgov.accounts.views import LoginView
from labgov.api.pages import token_list, token_revoke_view
from labgov.audit.views import audit_log
from labgov.core.views import healthz
from labgov.dashboard.views import home
from labgov.ops.metrics import metrics

urlpatterns = [
    path("", home, name="home"),
    path("login/", LoginView.as_view(), name="login"),
    # Institutional sign-in (labgov/accounts/oidc.py): 404 unless LABGOV_OIDC_CLIENT_ID is set.
    path("oidc/authenticate/", SignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", CallbackView.as_view(), name="oidc_authentication_callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("funding/", include("labgov.funding.urls")),
    path("audit/", audit_log, name="audit"),
    path("api/v1/", include("labgov.api.urls")),
    path("api-tokens/", token_list, name="api_tokens"),
    path("api-tokens/<int:pk>/revoke/", token_revoke_view, name="api_token_revoke"),
    path("runpod/", include("labgov.runpod.urls")),
    path("spend/", include("labgov.dashboard.urls")),
    path("provisioning/", include("labgov.provisioning.urls")),
    path("notifications/", include("labgov.notifications.urls")),
    path("alerts/", include("labgov.alerts.urls")),
    path("invoices/", include("labgov.invoicing.urls")),
    path("transfers/", include("labgov.transfers.urls")),
    path("exports/", include("labgov.exports.urls")),
    path("retention/", include("labgov.retention.urls")),
    path("idle/", include("labgov.idle.urls")),
    path("", include("labgov.accounts.urls")),
    path("admin/", admin.site.urls),
]
