from django.urls import path

from labgov.funding import views

app_name = "funding"
urlpatterns = [
    path("", views.funding_list, name="list"),
    path("new/", views.funding_create, name="create"),
    path("import/", views.grant_import, name="import"),
    path("<int:pk>/", views.funding_detail, name="detail"),
    path("<int:pk>/edit/", views.funding_edit, name="edit"),
    path("<int:pk>/allocations/new/", views.allocation_new, name="allocation_new"),
    path("allocations/<int:pk>/edit/", views.allocation_edit, name="allocation_edit"),
]
