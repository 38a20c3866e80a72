from django.urls import path

from labgov.retention import views

app_name = "retention"

urlpatterns = [
    path("", views.case_list, name="list"),
    path("<int:pk>/", views.case_detail, name="detail"),
    path("<int:pk>/<slug:action>/", views.case_action, name="action"),
    path("open/<int:resource_id>/", views.open_for_resource, name="open"),
    path("resource/<int:resource_id>/", views.case_for_resource, name="for_resource"),
    path("policies/", views.policy_list, name="policies"),
    path("policies/lab/<int:lab_id>/", views.policy_lab, name="policy_lab"),
    path("policies/default/<int:institution_id>/", views.policy_default, name="policy_default"),
]
