from django.urls import path

from labgov.alerts import views

app_name = "alerts"
urlpatterns = [
    path("", views.alert_list, name="list"),
    path("badge/", views.alert_badge, name="badge"),
    path("labs/<int:lab_id>/", views.lab_panel, name="lab_panel"),
    path("settings/", views.settings_list, name="settings"),
    path("settings/lab/<int:lab_id>/", views.settings_edit_lab, name="settings_lab"),
    path(
        "settings/institution/<int:institution_id>/",
        views.settings_edit_default,
        name="settings_default",
    ),
    path("<int:pk>/", views.alert_detail, name="detail"),
    path(
        "<int:pk>/<str:action>/",
        views.alert_transition,
        name="transition",
    ),
    path("<int:pk>/pod/<str:action>/", views.alert_pod_action, name="pod_action"),
    path("pods/<int:resource_id>/<str:action>/", views.own_pod_action, name="own_pod_action"),
]
