from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "labgov.accounts"
    label = "accounts"
