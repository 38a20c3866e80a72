from django.urls import path

from labgov.idle import views

app_name = "idle"
urlpatterns = [
    path("notices/<int:pk>/", views.notice_detail, name="notice"),
    path("notices/<int:pk>/keep/", views.notice_keep, name="notice_keep"),
    path("notices/<int:pk>/allow-stop/", views.notice_allow_stop, name="notice_allow_stop"),
    path("labs/<int:lab_id>/", views.lab_idle, name="lab"),
    path("labs/<int:lab_id>/policy/", views.policy_edit, name="policy"),
    path("labs/<int:lab_id>/never-stop/", views.never_stop, name="never_stop"),
    path("labs/<int:lab_id>/right-sizing/", views.right_sizing, name="right_sizing"),
    path("endpoints/<int:resource_id>/workers/", views.endpoint_workers, name="endpoint_workers"),
    path(
        "endpoint-changes/<int:pk>/<str:decision>/",
        views.endpoint_change_decide,
        name="endpoint_change_decide",
    ),
]
