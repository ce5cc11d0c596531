"""The watchdog that kills an engine's processes once the process that started them is gone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

STARTER = """\
import os, subprocess, sys, time
from evalgpu.engines._reaper import descendants, watch
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
kept = subprocess.Popen(sleep)  # there before the engine: never the watchdog's
before = {pid for pid, _ in descendants(os.getpid())}
dog = watch(before)
# What vLLM's start-up does: an engine core that starts a worker.
nest = "import subprocess, sys, time; subprocess.Popen(%r); time.sleep(60)" % (sleep,)
core = subprocess.Popen([sys.executable, "-c", nest])
while len(descendants(core.pid)) < 1: time.sleep(0.05)
time.sleep(1.5)  # the watchdog collects every 0.2 s, once started (slower on a busy machine)
worker = descendants(core.pid)[0]
if sys.argv[1] == "settle":  # the engine names what its LLM started: the core alone, here
    dog.settle([p for p in descendants(os.getpid()) if p[0] == core.pid])
print(kept.pid, core.pid, worker[0], flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def _kill_starter(mode: str) -> tuple[int, int, int]:
    """Run STARTER, kill -9 it once its processes are up, wait for the watchdog's work;
    returns the pids of the process it had before, the engine core and the worker."""
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, mode], stdout=subprocess.PIPE, text=True
    )
    assert starter.stdout is not None
    kept, core, worker = (int(pid) for pid in starter.stdout.readline().split())
    assert all(_alive(pid) for pid in (kept, core, worker))
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 10
    while _alive(core) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the worker goes in the same pass, if it goes
    return kept, core, worker


linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


@linux
def test_a_starter_killed_while_its_engine_starts_takes_the_engines_processes_with_it():
    # What a kill -9 in vLLM's minute of start-up left: its engine core and worker, for good.
    kept, core, worker = _kill_starter("starting")
    try:
        assert not _alive(core) and not _alive(worker)
        assert _alive(kept)  # what was there before the engine is not the watchdog's
    finally:
        for pid in (kept, core, worker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@linux
def test_once_settled_the_watchdog_kills_exactly_the_processes_named():
    kept, core, worker = _kill_starter("settle")
    try:
        assert not _alive(core)
        assert _alive(worker) and _alive(kept)
    finally:
        for pid in (kept, core, worker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
