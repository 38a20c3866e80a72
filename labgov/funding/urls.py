from django.urls import path

from labgov.funding import views

app_name = "funding"
urlpatterns = [
    path("", views.funding_list, name="list"),
    path("new/", views.funding_create, name="create"),
    path("import/", views.grant_import, name="import"),
    path("proposals/", views.proposal_list, name="proposals"),
    path("proposals/new/", views.proposal_new, name="proposal_new"),
    path("proposals/<int:pk>/approve/", views.proposal_approve, name="proposal_approve"),
    path("proposals/<int:pk>/reject/", views.proposal_reject, name="proposal_reject"),
    path("<int:pk>/", views.funding_detail, name="detail"),
    path("<int:pk>/propose/", views.proposal_change, name="proposal_change"),
    path("<int:pk>/edit/", views.funding_edit, name="edit"),
    path("<int:pk>/allocations/new/", views.allocation_new, name="allocation_new"),
    path("allocations/<int:pk>/edit/", views.allocation_edit, name="allocation_edit"),
]
