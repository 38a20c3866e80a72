from django.urls import path

from labgov.invoicing import views

app_name = "invoicing"
urlpatterns = [
    path("", views.periods, name="periods"),
    path("mine/", views.mine, name="mine"),
    path("<int:institution_id>/<int:year>/<int:month>/", views.period, name="period"),
    path(
        "<int:institution_id>/<int:year>/<int:month>/generate/",
        views.period_generate,
        name="generate",
    ),
    path("<int:institution_id>/<int:year>/<int:month>/close/", views.period_close, name="close"),
    path("invoice/<int:pk>/", views.invoice_detail, name="invoice"),
    path("invoice/<int:pk>/issue/", views.invoice_issue_view, name="issue"),
    path("invoice/<int:pk>/void/", views.invoice_void_view, name="void"),
    path("invoice/<int:pk>/lines/", views.invoice_line_add_view, name="line_add"),
    path(
        "invoice/<int:pk>/lines/<int:line_pk>/remove/",
        views.invoice_line_remove_view,
        name="line_remove",
    ),
]
