from django.apps import AppConfig


class InvoicingConfig(AppConfig):
    name = "labgov.invoicing"
    label = "invoicing"

    def ready(self) -> None:
        from labgov.notifications.kinds import register

        register("invoicing.drafts_ready", "A month's draft invoices are ready")
