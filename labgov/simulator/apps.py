from django.apps import AppConfig


class SimulatorConfig(AppConfig):
    name = "labgov.simulator"
    label = "simulator"
