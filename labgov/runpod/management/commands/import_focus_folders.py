from django.core.management.base import BaseCommand

from labgov.runpod.focus_folders import folders_import
from labgov.runpod.models import FocusDrop


class Command(BaseCommand):
    help = (
        "Import the new files of every FOCUS billing source's folder (under "
        "LABGOV_FOCUS_DROP_ROOT), as the worker does every LABGOV_FOCUS_FOLDER_MINUTES."
    )

    def handle(self, *args, **options):
        started = FocusDrop.objects.order_by("-id").values_list("id", flat=True).first() or 0
        read = folders_import()
        for drop in FocusDrop.objects.filter(id__gt=started).select_related("account"):
            self.stdout.write(
                f"{drop.account.name}: {drop.file_name}: {drop.outcome}. {drop.message}"
            )
        self.stdout.write(f"{read} file(s) read.")
