from django.urls import path

from labgov.runpod import focus_views, views

app_name = "runpod"
urlpatterns = [
    path("accounts/", views.account_list, name="account_list"),
    path("accounts/new/", views.account_new, name="account_new"),
    path("accounts/<int:pk>/", views.account_detail, name="account_detail"),
    path("accounts/<int:pk>/edit/", views.account_edit, name="account_edit"),
    path("accounts/<int:pk>/test/", views.account_test, name="account_test"),
    path("accounts/<int:pk>/balance/", views.account_balance, name="account_balance"),
    path("accounts/<int:pk>/sync/", views.account_sync_now, name="account_sync"),
    path("accounts/<int:pk>/active/", views.account_active, name="account_active"),
    path(
        "accounts/<int:pk>/cluster-limit/",
        views.account_cluster_limit,
        name="account_cluster_limit",
    ),
    path("accounts/<int:pk>/remove/", views.account_remove_view, name="account_remove"),
    path("focus/", focus_views.focus_sources, name="focus_sources"),
    path("focus/new/", focus_views.focus_source_new, name="focus_source_new"),
    path("focus/<int:pk>/", focus_views.focus_source, name="focus_source"),
    path("focus/<int:pk>/folder/", focus_views.focus_source_folder, name="focus_source_folder"),
    path("resources/", views.resource_list, name="resources"),
    path("resources/<int:pk>/assign/", views.resource_assign_view, name="resource_assign"),
    path("unattributed/", views.unattributed_queue, name="unattributed"),
    path("rules/", views.rule_list, name="rules"),
    path("tag-claims/", views.tag_claims, name="tag_claims"),
    path("tag-claims/<int:pk>/<str:decision>/", views.tag_claim_decide, name="tag_claim_decide"),
    path("rules/<int:pk>/deactivate/", views.rule_deactivate_view, name="rule_deactivate"),
]
