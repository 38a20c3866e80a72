from django.urls import path

from labgov.provisioning.views import policies, requests, review

app_name = "provisioning"
urlpatterns = [
    path("", requests.request_list, name="list"),
    path("new/", requests.request_new, name="new"),
    path("estimate/", requests.estimate, name="estimate"),
    path("review/", review.review_queue, name="review"),
    path("policies/", policies.policy_list, name="policies"),
    path("policies/lab/<int:lab_id>/", policies.policy_edit_lab, name="policy_lab"),
    path(
        "policies/institution/<int:institution_id>/",
        policies.policy_edit_default,
        name="policy_default",
    ),
    path("<int:pk>/", requests.request_detail, name="detail"),
    path("<int:pk>/edit/", requests.request_edit, name="edit"),
    path("<int:pk>/submit/", requests.request_submit_view, name="submit"),
    path("<int:pk>/cancel/", requests.request_cancel_view, name="cancel"),
    path("<int:pk>/retry/", requests.request_retry_view, name="retry"),
    path(
        "<int:pk>/mark-provisioned/",
        requests.request_mark_provisioned_view,
        name="mark_provisioned",
    ),
    path("<int:pk>/approve/", review.request_approve_view, name="approve"),
    path("<int:pk>/deny/", review.request_deny_view, name="deny"),
]
