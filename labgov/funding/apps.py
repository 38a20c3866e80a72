from django.apps import AppConfig


class FundingConfig(AppConfig):
    name = "labgov.funding"
    label = "funding"
