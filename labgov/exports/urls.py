from django.urls import path

from labgov.exports import views

app_name = "exports"
period = "<int:pk>/<int:year>/<int:month>/"
urlpatterns = [
    path(period, views.period, name="period"),
    path(period + "invoice-lines.csv", views.period_lines_csv, name="period_lines_csv"),
    path(period + "journal.csv", views.period_journal_csv, name="period_journal_csv"),
    path(period + "billing-records.csv", views.period_records_csv, name="period_records_csv"),
    path(period + "focus.csv", views.period_focus_csv, name="period_focus_csv"),
    path(period + "jobs/", views.job_create, name="job_create"),
    path("jobs/<int:pk>/", views.job, name="job"),
    path("jobs/<int:pk>/download/", views.job_download, name="job_download"),
    path("mine.csv", views.my_share_csv, name="my_share_csv"),
    path("invoices/<int:pk>.csv", views.invoice_csv, name="invoice_csv"),
    path("invoices/<int:pk>.xlsx", views.invoice_xlsx, name="invoice_xlsx"),
    path("invoices/<int:pk>.pdf", views.invoice_pdf, name="invoice_pdf"),
]
