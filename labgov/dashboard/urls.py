from django.urls import path

from labgov.dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("me/", views.me, name="me"),
    path("labs/<int:pk>/", views.lab, name="lab"),
    path("funding/<int:pk>/", views.funding, name="funding"),
    path("institution/", views.institution, name="institution"),
]
