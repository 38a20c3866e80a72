from django.apps import AppConfig

# Kinds of notification this app sends: finance and institution admins hear of a lab admin's
# proposed cost transfer or back-dated move of spend; the proposer hears of the decision.
NOTIFICATION_KINDS = {
    "transfer.proposal": ("A lab admin proposed a cost transfer", "warning"),
    "transfer.decided": ("A cost transfer was decided", "info"),
    "spend_move.proposal": ("A lab admin proposed a back-dated move of spend", "warning"),
    "spend_move.decided": ("A back-dated move of spend was decided", "info"),
}


class TransfersConfig(AppConfig):
    name = "labgov.transfers"
    label = "transfers"

    def ready(self):
        from labgov.notifications.kinds import register

        for kind, (label, severity) in NOTIFICATION_KINDS.items():
            register(kind, label, severity)
