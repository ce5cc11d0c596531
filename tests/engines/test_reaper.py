"""The watchdog that kills an engine's processes once the process that started them is gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_the_processes_watched_are_killed_when_their_starter_is_killed():
    # What a kill -9 of a run leaves: vLLM's engine core and its worker must not live on. A
    # process that starts a child and a grandchild as vLLM does, then the watchdog over them.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, subprocess, sys, time\n"
            "from evalgpu.engines._reaper import descendants, watch\n"
            'nest = \'import subprocess, sys, time; subprocess.Popen([sys.executable, "-c", '
            '"import time; time.sleep(60)"]); time.sleep(60)\'\n'
            "subprocess.Popen([sys.executable, '-c', nest])\n"
            "while len(descendants(os.getpid())) < 2: time.sleep(0.05)\n"
            "started = descendants(os.getpid())\n"
            "watch(started)\n"
            "print(' '.join(str(pid) for pid, _ in started), flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    started = [int(pid) for pid in parent.stdout.readline().split()]

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/status") as f:
                return "State:\tZ" not in f.read()
        except FileNotFoundError:
            return False

    assert len(started) == 2 and all(alive(pid) for pid in started)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in started)
