from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

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
    path("runpod/", include("labgov.runpod.urls")),
    path("spend/", include("labgov.dashboard.urls")),
    path("provisioning/", include("labgov.provisioning.urls")),
    path("notifications/", include("labgov.notifications.urls")),
    path("alerts/", include("labgov.alerts.urls")),
    path("invoices/", include("labgov.invoicing.urls")),
    path("transfers/", include("labgov.transfers.urls")),
    path("", include("labgov.accounts.urls")),
    path("admin/", admin.site.urls),
]
