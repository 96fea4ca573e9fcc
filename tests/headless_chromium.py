"""Open a page in headless Chromium and report what a reader would see: every image's natural
size, every console error, and a full-page screenshot.

Only the standard library: Chromium's DevTools protocol over ``--remote-debugging-pipe``
(commands as NUL-terminated JSON on the browser's fd 3, replies and events on its fd 4), so no
selenium, playwright or websocket package is needed. Used by tests/test_report_browser.py; run
it by hand as ``python tests/headless_chromium.py PAGE.html SHOT.png``.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
IMAGES_JS = (
    "JSON.stringify(Array.from(document.images).map(i => ({src: i.src.slice(0, 48), "
    "complete: i.complete, naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight})))"
)


def find_chromium() -> str | None:
    """The first Chromium-family browser on PATH, or None."""
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


class _Pipe:
    """The DevTools protocol over the browser's pipes: commands by id, events collected."""

    def __init__(self, to_browser: int, from_browser: int, timeout: float) -> None:
        self.wfd, self.rfd, self.deadline = to_browser, from_browser, time.monotonic() + timeout
        self.buf, self.events, self.next_id = b"", [], 0

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.rfd], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        while True:
            ev = self._read_message()
            if ev.get("method") == method:
                return ev
            self.events.append(ev)


def _launch(browser: str, profile: str) -> tuple[subprocess.Popen, int, int]:
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()

    def wire_fds() -> None:  # in the child: our pipe ends become its fd 3 (in) and fd 4 (out)
        a, b = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
        os.dup2(a, 3)
        os.dup2(b, 4)

    args = [
        browser,
        "--headless",
        "--no-sandbox",  # CI and containers run as root
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--hide-scrollbars",
        "--remote-debugging-pipe",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=False, preexec_fn=wire_fds
    )
    os.close(to_r)
    os.close(from_w)
    return proc, to_w, from_r


def _console_errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for ev in events:
        method, params = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.append(
                " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            )
        elif method == "Runtime.exceptionThrown":
            out.append(params.get("exceptionDetails", {}).get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            out.append(params["entry"].get("text", "error"))
    return out


def check_page(page: Path, screenshot: Path | None = None, timeout: float = 90.0) -> dict[str, Any]:
    """Load ``page`` (a file) and return ``{"title", "images": [...], "console_errors": [...]}``;
    write a full-page PNG screenshot to ``screenshot`` if given."""
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("no Chromium on PATH")
    with tempfile.TemporaryDirectory(prefix="kvplan-chromium-") as profile:
        proc, wfd, rfd = _launch(browser, profile)
        try:
            cdp = _Pipe(wfd, rfd, timeout)
            target = cdp.call("Target.createTarget", url="about:blank")["targetId"]
            sid = cdp.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                cdp.call(f"{domain}.enable", sid)
            cdp.call(
                "Emulation.setDeviceMetricsOverride",
                sid,
                width=1100,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            cdp.call("Page.navigate", sid, url=page.resolve().as_uri())
            cdp.wait_event("Page.loadEventFired")
            value = cdp.call("Runtime.evaluate", sid, expression=IMAGES_JS, returnByValue=True)
            images = json.loads(value["result"]["value"])
            title = cdp.call("Runtime.evaluate", sid, expression="document.title", returnByValue=True)
            if screenshot is not None:
                _screenshot(cdp, sid, screenshot)
            errors = _console_errors(cdp.events)
            cdp.call("Browser.close")
        finally:
            os.close(wfd)
            os.close(rfd)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"title": title["result"].get("value"), "images": images, "console_errors": errors}


def _screenshot(cdp: _Pipe, sid: str, path: Path) -> None:
    height = cdp.call(
        "Runtime.evaluate", sid, expression="document.documentElement.scrollHeight", returnByValue=True
    )["result"]["value"]
    clip = {"x": 0, "y": 0, "width": 1100, "height": int(height), "scale": 1}
    shot = cdp.call("Page.captureScreenshot", sid, format="png", clip=clip, captureBeyondViewport=True)
    path.write_bytes(base64.b64decode(shot["data"]))


if __name__ == "__main__":  # pragma: no cover
    result = check_page(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
    print(json.dumps(result, indent=1))
