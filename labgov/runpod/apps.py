from django.apps import AppConfig


class RunpodConfig(AppConfig):
    name = "labgov.runpod"
    label = "runpod"
