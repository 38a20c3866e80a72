from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from labgov.api.pages import token_list, token_revoke_view
from labgov.audit.views import audit_log
from labgov.core.views import healthz
from labgov.dashboard.views import home

urlpatterns = [
    path("", home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
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
    path("", include("labgov.accounts.urls")),
    path("admin/", admin.site.urls),
]
