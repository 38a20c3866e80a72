from django.urls import path

from labgov.transfers import views

app_name = "transfers"
urlpatterns = [
    path("", views.transfer_list, name="list"),
    path("new/", views.transfer_new, name="new"),
    path("<int:pk>/approve/", views.transfer_approve, name="approve"),
    path("<int:pk>/reject/", views.transfer_reject, name="reject"),
    path("moves/<int:pk>/approve/", views.spend_move_approve_view, name="move_approve"),
    path("moves/<int:pk>/reject/", views.spend_move_reject_view, name="move_reject"),
    path("resources/<int:pk>/", views.resource_funding, name="resource_funding"),
]
