# gunicorn -c deploy/gunicorn.conf.py labgov.wsgi
import multiprocessing
import os
import shutil
import tempfile

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# One single-threaded worker per core: a dashboard request is CPU-bound Python (its database
# waits are a few ms), so more processes or threads than cores only queue inside the machine
# and stretch the slow tail. Measured with bench/load_bench.py at 1M records, 16 connections,
# page cache off, on 2 cores: 2 x 1 answered more and with a lower p99 than 5 x 2 (the old
# 2 x cores + 1 with 2 threads), 2 x 2 and 3 x 1 (README, "Benchmarks"). nginx holds the
# connections waiting meanwhile.
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
timeout = 60
graceful_timeout = 30
accesslog = "-"
errorlog = "-"
forwarded_allow_ips = os.environ.get("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1")

# Logs as labgov's settings choose them (LABGOV_LOG_FORMAT, JSON unless DEBUG): with JSON,
# labgov logs every request itself as one JSON line, so gunicorn's plain access log is off and
# its own messages are JSON too.
_debug = os.environ.get("DEBUG", "0").strip().lower() in ("1", "true", "yes", "on")
if os.environ.get("LABGOV_LOG_FORMAT", "plain" if _debug else "json") == "json":
    accesslog = None
    logconfig_dict = {
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False}
        },
        "formatters": {"generic": {"()": "labgov.core.log_json.JsonFormatter"}},
    }

# /metrics adds up the request latency of every worker process through files in this
# directory (prometheus-client's multiprocess mode); a fresh one per start unless it is set.
_own_metrics_dir = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _own_metrics_dir:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="labgov-metrics-")


def on_starting(server):
    directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):  # figures of a previous run's processes
        if name.endswith(".db"):
            os.remove(os.path.join(directory, name))


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    if _own_metrics_dir:
        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
