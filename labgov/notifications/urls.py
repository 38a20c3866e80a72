from django.urls import path

from labgov.notifications import views

app_name = "notifications"
urlpatterns = [
    path("", views.notification_list, name="list"),
    path("badge/", views.unread_badge, name="badge"),
    path("read-all/", views.mark_all_read, name="read_all"),
    path("settings/", views.mute_settings, name="settings"),
    path("<int:pk>/open/", views.notification_open, name="open"),
    path("labs/<int:lab_id>/webhook/", views.lab_webhook, name="lab_webhook"),
    path("labs/<int:lab_id>/webhook/test/", views.lab_webhook_test, name="lab_webhook_test"),
]
