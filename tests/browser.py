"""A real headless Chromium driven over the DevTools protocol, standard library only.

`--remote-debugging-pipe` makes Chromium read commands from fd 3 and write answers and events
to fd 4, each a JSON message ended by a NUL byte. The browser runs in a session of its own and
is killed with its whole process group when the visit ends, whatever happened; every read has
a deadline, so a hung browser fails the test instead of stalling the suite.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import unavailable

NAMES = ("chromium", "chromium-browser")
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}


def chromium() -> str:
    """The Chromium binary; without it the test skips saying so, except under CI, where it
    fails (conftest.unavailable): .ci/run installs it."""
    path = next((p for p in map(shutil.which, NAMES) if p), None)
    if path is None:
        unavailable("Chromium", "none on PATH (looked for " + ", ".join(NAMES) + "): install "
                    "it with `apt-get install chromium`, as .ci/run does")
    return path


@dataclass
class Visit:
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, error logs
    value: object = None  # what the script evaluated to
    screenshot: bytes = b""  # PNG of the whole page at phone width


def _above(fd: int, low: int) -> int:
    """`fd` moved to a number >= `low`."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, low)
    os.close(fd)
    return moved


class Browser:
    def __init__(self, deadline_s: float = 60.0) -> None:
        binary = chromium()  # first: a skip must leave no pipe or profile behind
        self.deadline = time.monotonic() + deadline_s
        self.profile = tempfile.TemporaryDirectory(prefix="lockguard-chromium-")
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        # Above 4, so that putting them on fds 3 and 4 in the child cannot clobber one another.
        to_browser_r, from_browser_w = (_above(to_browser_r, 10), _above(from_browser_w, 10))
        argv = [binary, "--headless", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                f"--user-data-dir={self.profile.name}", "--remote-debugging-pipe"]
        if os.geteuid() == 0:
            argv.append("--no-sandbox")  # Chromium refuses to sandbox as root (CI runs as root)
        # fds 3 and 4 in the browser, whatever numbers the pipes got here.
        trampoline = (f"import os, sys; os.dup2({to_browser_r}, 3); os.dup2({from_browser_w}, 4);"
                      " os.execv(sys.argv[1], sys.argv[1:])")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", trampoline, *argv],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []

    def close(self) -> str:
        """Kill the browser's process group; return what it wrote on stderr (for messages)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        os.close(self.to_browser)
        os.close(self.from_browser)
        err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
        if self.proc.stderr:
            self.proc.stderr.close()
        self.profile.cleanup()
        return err[-3000:]

    def _message(self) -> dict:
        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            ready, _, _ = select.select([self.from_browser], [], [], max(left, 0))
            assert ready, "chromium did not answer in time"
            chunk = os.read(self.from_browser, 1 << 16)
            assert chunk, "chromium closed the DevTools pipe"
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self.next_id:
                assert "error" not in answer, f"{method}: {answer['error']}"
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str, after: int = 0) -> dict:
        """The first event `method` among the events from index `after` on, waiting for it."""
        seen = next((m for m in self.events[after:] if m.get("method") == method), None)
        while seen is None:
            message = self._message()
            self.events.append(message)
            if message.get("method") == method:
                seen = message
        return seen


def visit(page: Path, script: str) -> Visit:
    """Open `page` at phone size; collect the requests and errors, evaluate `script` (an
    expression), and take a full-page screenshot."""
    browser = Browser()
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride", PHONE, session=session)
        before = len(browser.events)  # about:blank's own load event may come late
        browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired", after=before)
        result = browser.send("Runtime.evaluate", {"expression": script, "returnByValue": True},
                              session=session)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        size = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
        shot = browser.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": PHONE["width"], "height": size["height"],
                     "scale": 1}}, session=session)
        out = Visit(value=result["result"].get("value"),
                    screenshot=base64.b64decode(shot["data"]))
        for event in browser.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Network.requestWillBeSent":
                out.requests.append(params["request"]["url"])
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                out.errors.append("console: " + json.dumps(params["args"]))
            elif method == "Runtime.exceptionThrown":
                out.errors.append("exception: " + json.dumps(params["exceptionDetails"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                out.errors.append("log: " + params["entry"]["text"])
        return out
    except (AssertionError, OSError) as exc:  # OSError: a browser that died closes its pipe
        raise AssertionError(f"{exc!r}\nchromium's stderr:\n{browser.close()}") from None
    finally:
        if browser.proc.returncode is None:
            browser.close()
