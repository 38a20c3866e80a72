"""Issue 9: credentials in a pod's environment are not stored, whatever the variable is
called."""

import pytest

from labgov.runpod.inventory import inventory_sync
from labgov.runpod.models import Resource
from labgov.runpod.redaction import REDACTED, redact_value, redacted_env

SECRETS = {
    "DATABASE_URL": ("postgres://app:hunter2pass@db.internal:5432/lab", "hunter2pass"),
    "REDIS": ("redis://:s3cr3tRedis@cache:6379/0", "s3cr3tRedis"),
    "OPENAI": ("sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv", "Ab3dEf6hIj9kLm2nOp5qRs8tUv"),
    "ANTHROPIC": ("sk-ant-api03-Zx8Yw7Vu6Ts5Rq4Po3Nm2", "Zx8Yw7Vu6Ts5Rq4Po3Nm2"),
    "HF": ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"),
    "GH": ("ghp_1234567890abcdefABCDEF1234567890ab", "ghp_1234567890"),
    "AWS_ID": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    "HEADER": ("Bearer eyJhbGciOiJIUzI1NiJ9.payload", "eyJhbGciOiJIUzI1NiJ9"),
    "JWT": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlLXZhbHVl", "eyJzdWIiOi"),
    "SSH": ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n", "b3BlbnNzaC1rZXk"),
    "RUNPOD": ("rpa_9F3KQ2ZL8XW1M4N7B6V5C0D2E8R4T1Y6U3I9O", "9F3KQ2ZL8XW1M4N7B6V5"),
    "RANDOM": ("x9Qm2ZpL7vK4wR8tY1uN6bF3hJ5gD0sA2eC", "x9Qm2ZpL7vK4wR8tY1uN"),
    "LIBPQ": ("host=db user=app password=Tr0ub4dor dbname=lab", "Tr0ub4dor"),
    "JSON": ('{"user": "app", "token": "abc123def456"}', "abc123def456"),
    "SLACK": ("xoxb-123456789012-abcdefghijkl", "xoxb-123456789012"),
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_value_carrying_a_credential_is_not_kept(name):
    value, secret = SECRETS[name]
    kept = redacted_env({name: value})[name]
    assert secret not in kept
    assert REDACTED in kept


def test_a_url_keeps_all_but_its_password():
    assert redact_value("postgres://app:hunter2pass@db.internal:5432/lab") == (
        "postgres://app:[redacted]@db.internal:5432/lab"
    )


@pytest.mark.parametrize(
    "value",
    [
        "17",
        "llama-3",
        "meta-llama/Meta-Llama-3.1-70B-Instruct",
        "TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ",
        "/workspace/checkpoints/run-2026-03-18",
        "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04",
        "https://huggingface.co/datasets/imagenet-1k",
        "postgres://app@db.internal/lab",
        "3f786850e387550fdab836ed7e6dc881de23001b",  # a commit
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "0d6a1b1c-3e6f-4a5e-9c1b-8f2e7d6c5b4a",
        "0d6a1b1c3e6f4a5e9c1b8f2e7d6c5b4a",
        "cuda,compute,utility",
        "The password is on the wiki",
    ],
)
def test_ordinary_values_are_kept(value):
    assert redacted_env({"SETTING": value}) == {"SETTING": value}


def test_secret_names_are_still_redacted():
    assert redacted_env({"HF_TOKEN": "short", "JUPYTER_PASSWORD": "x"}) == {
        "HF_TOKEN": REDACTED,
        "JUPYTER_PASSWORD": REDACTED,
    }


def test_a_synced_pod_stores_no_credential(world, sim, sim_account, fast_clients):
    """A pod created on Runpod with a DATABASE_URL holding a password: neither the parsed pod
    nor the stored resource carries the password."""
    client = fast_clients(sim_account)
    gpu = sim.state.gpu_types()[0]["id"]
    pod = sim.state.create_pod(
        {
            "name": "leaky",
            "image": "runpod/pytorch:2.8.0",
            "gpu": {"id": gpu, "count": 1},
            "cloud": "SECURE",
            "env": {
                "DATABASE_URL": "postgres://app:hunter2pass@db.internal/lab",
                "OPENAI_CONFIG": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv",
                "LABGOV_ALLOCATION": str(world.allocation.pk),
            },
        }
    )
    parsed = client.get_pod(pod["id"])
    assert "hunter2pass" not in str(parsed.env) and "Ab3dEf6h" not in str(parsed.env)
    inventory_sync(account=sim_account, client=client, now=sim.state.now)
    stored = Resource.objects.get(runpod_id=pod["id"]).env
    assert stored == {
        "DATABASE_URL": "postgres://app:[redacted]@db.internal/lab",
        "OPENAI_CONFIG": REDACTED,
        "LABGOV_ALLOCATION": str(world.allocation.pk),
    }


def test_environments_stored_before_are_redacted_by_the_command(db):
    from django.core.management import call_command

    from tests.factories import ResourceFactory

    leaky = ResourceFactory(env={"DATABASE_URL": "postgres://app:hunter2pass@db/x", "A": "1"})
    clean = ResourceFactory(env={"MODEL": "llama-3"})
    call_command("runpod_redact_env")
    leaky.refresh_from_db(), clean.refresh_from_db()
    assert leaky.env == {"DATABASE_URL": "postgres://app:[redacted]@db/x", "A": "1"}
    assert clean.env == {"MODEL": "llama-3"}
