from django.urls import path

from labgov.accounts import views

app_name = "accounts"
urlpatterns = [
    path("labs/", views.lab_list, name="lab_list"),
    path("labs/new/", views.lab_new, name="lab_new"),
    path("labs/<int:pk>/", views.lab_detail, name="lab_detail"),
    path("memberships/<int:pk>/end/", views.membership_end_view, name="membership_end"),
    path("institution/", views.institution_people, name="institution"),
    path("institution/ceiling/", views.institution_ceiling, name="institution_ceiling"),
    path("institution/time-zone/", views.institution_time_zone, name="institution_time_zone"),
]
