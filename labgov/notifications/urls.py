from django.urls import path

from labgov.notifications import views

app_name = "notifications"
urlpatterns = [
    path("", views.notification_list, name="list"),
    path("badge/", views.unread_badge, name="badge"),
    path("read-all/", views.mark_all_read, name="read_all"),
    path("<int:pk>/open/", views.notification_open, name="open"),
]
