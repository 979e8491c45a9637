"""The audit's HTML report in a real browser: Debian's headless Chromium opens the page from disk,
driven over the DevTools protocol (aiohttp's websocket client), with every http(s) request sent to a
dead proxy. No console error, no exception, no request but the file itself; the page's script ran;
the numbers in the DOM after it ran equal the summary's; the run filter works; the screenshot is a
real, non-blank PNG. Needs no broker. A missing chromium fails the test (.ci/run installs it)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import struct
import subprocess
import time
import zlib
from pathlib import Path

import aiohttp
import pytest

from streams.audit.html import render
from tests.unit.test_audit_html import HOSTILE, Page, sample_report, summary_leaves

WIDTH, HEIGHT = 1280, 900
PROBE = """JSON.stringify({
  ready: document.documentElement.dataset.ready || null,
  pwned: window.__pwned === undefined ? null : window.__pwned,
  images: document.images.length,
  scripts: document.scripts.length,
  runs: document.querySelectorAll("details.run").length,
  bars: document.querySelectorAll("svg.chart g").length,
  overflows: document.documentElement.scrollWidth > document.documentElement.clientWidth,
})"""
# The budgets and shadow section as the reader sees it: its box, its headings, and each
# number shown in it (visible: laid out with a size), by data-key.
POLICY = """(() => {
  const s = document.getElementById("policy");
  const r = s.getBoundingClientRect();
  const shown = {};
  for (const e of s.querySelectorAll("[data-key]")) {
    const b = e.getBoundingClientRect();
    const visible = b.width > 0 && b.height > 0 && getComputedStyle(e).visibility !== "hidden";
    if (visible) shown[e.dataset.key] = e.textContent;
  }
  return JSON.stringify({
    box: [r.x, r.y + window.scrollY, r.width, r.height],
    headings: Array.from(s.querySelectorAll(":scope > h2, :scope > h3")).map(h => h.textContent),
    shown,
  });
})()"""
FILTER = """(() => {
  const f = document.getElementById("run-filter");
  f.value = "RUN-ABORT";
  f.dispatchEvent(new Event("input"));
  const visible = Array.from(document.querySelectorAll("details.run")).filter(r => !r.hidden);
  const result = [visible.map(r => r.querySelector("summary code").textContent),
                  document.getElementById("runs-shown").textContent];
  f.value = "";
  f.dispatchEvent(new Event("input"));
  return JSON.stringify(result);
})()"""


class Browser:
    """One Chromium process with its own profile, in its own process group, and a DevTools connection."""

    def __init__(self, workdir: Path) -> None:
        exe = shutil.which("chromium")
        if exe is None:
            pytest.fail("chromium is not installed: Debian's `chromium` package is needed (.ci/run installs it)")
        self.profile = workdir / "profile"
        self.log_path = workdir / "chromium.log"
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--proxy-server=127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>",
                f"--window-size={WIDTH},{HEIGHT}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            start_new_session=True,
        )
        self.events: list[dict] = []
        self._pending: dict[int, asyncio.Future] = {}
        self._next = 0
        self._changed = asyncio.Event()

    def ws_url(self, timeout: float = 60) -> str:
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"chromium exited with {self.proc.returncode}: {self.log_tail()}")
            if port_file.exists():
                lines = port_file.read_text().split()
                if len(lines) >= 2:
                    return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            time.sleep(0.05)
        pytest.fail(f"chromium gave no DevTools port within {timeout}s: {self.log_tail()}")

    def log_tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-2000:]

    async def read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(msg.data)
            if "id" in data:
                fut = self._pending.pop(data["id"])
                if "error" in data:
                    fut.set_exception(AssertionError(f"DevTools error: {data['error']}"))
                else:
                    fut.set_result(data.get("result", {}))
            else:
                self.events.append(data)
                self._changed.set()

    async def call(self, ws, method: str, session: str | None = None, **params) -> dict:
        self._next += 1
        fut = asyncio.get_running_loop().create_future()
        self._pending[self._next] = fut
        msg = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        await ws.send_str(json.dumps(msg))
        return await fut

    async def event(self, method: str) -> dict:
        while True:
            for e in self.events:
                if e["method"] == method:
                    return e
            self._changed.clear()
            await self._changed.wait()

    async def evaluate(self, ws, session: str, expression: str):
        r = await self.call(ws, "Runtime.evaluate", session, expression=expression, returnByValue=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return json.loads(r["result"]["value"])

    def stop(self) -> None:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self.log.close()


async def visit(browser: Browser, page: Path, url: str) -> dict:
    """Open the page, collect what the browser says about it, probe it and take a screenshot
    (`url`: the browser's DevTools address)."""
    async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
        reader = asyncio.create_task(browser.read(ws))
        try:
            target = (await browser.call(ws, "Target.createTarget", url="about:blank"))["targetId"]
            s = (await browser.call(ws, "Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                await browser.call(ws, f"{domain}.enable", s)
            await browser.call(
                ws,
                "Emulation.setDeviceMetricsOverride",
                s,
                width=WIDTH,
                height=HEIGHT,
                deviceScaleFactor=1,
                mobile=False,
            )
            browser.events.clear()
            await browser.call(ws, "Page.navigate", s, url=page.as_uri())
            await asyncio.wait_for(browser.event("Page.loadEventFired"), 10)
            policy = await browser.evaluate(ws, s, POLICY)
            x, y, w, h = policy["box"]
            shot = await browser.call(
                ws,
                "Page.captureScreenshot",
                s,
                format="png",
                captureBeyondViewport=True,
                clip={"x": x, "y": y, "width": w, "height": h, "scale": 1},
            )
            out = {
                "policy": policy,
                "policy_png": base64.b64decode(shot["data"]),
                "probe": await browser.evaluate(ws, s, PROBE),
                "filtered": await browser.evaluate(ws, s, FILTER),
                "dom": (
                    await browser.call(
                        ws, "Runtime.evaluate", s, expression="document.documentElement.outerHTML", returnByValue=True
                    )
                )["result"]["value"],
                "png": base64.b64decode((await browser.call(ws, "Page.captureScreenshot", s, format="png"))["data"]),
            }
            await asyncio.sleep(0.2)  # late console messages, if any
            out["events"] = list(browser.events)
            await browser.call(ws, "Browser.close")
        finally:
            reader.cancel()
    return out


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the rows of an 8-bit RGB or RGBA PNG, unfiltered (PNG spec, section 9)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 4 if color == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif f == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif f == 4:
            for i in range(stride):
                a, b, c = (line[i - bpp], prev[i], prev[i - bpp]) if i >= bpp else (0, prev[i], 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, [r if bpp == 3 else b"".join(r[i : i + 3] for i in range(0, stride, 4)) for r in rows]


def test_the_report_in_headless_chromium(tmp_path):
    report = sample_report()
    page = tmp_path / "report.html"
    page.write_text(render(report), encoding="utf-8")
    started = time.monotonic()
    browser = Browser(tmp_path)
    try:
        # Chromium's start is waited for first (ws_url polls, up to 60 s): under load it
        # took over 25 s, which left a bound around both too little for the page itself.
        url = browser.ws_url()
        out = asyncio.run(asyncio.wait_for(visit(browser, page, url), 60))
    finally:
        browser.stop()
    elapsed = time.monotonic() - started

    # Nothing went wrong in the page and nothing was fetched but the page.
    events = out["events"]
    errors = [e["params"] for e in events if e["method"] == "Runtime.exceptionThrown"]
    errors += [
        e["params"]
        for e in events
        if e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "warning", "assert")
    ]
    errors += [
        e["params"]["entry"]
        for e in events
        if e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] in ("error", "warning")
    ]
    assert errors == []
    requested = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    assert requested == [page.as_uri()]

    # Its script ran, the hostile strings stayed text, and the filter of runs works.
    probe = out["probe"]
    assert probe == {
        "ready": "1",
        "pwned": None,
        "images": 0,
        "scripts": 1,
        "runs": 2,
        "bars": probe["bars"],
        "overflows": False,
    }
    assert 0 < probe["bars"] <= 480
    assert out["filtered"] == [["run-abort"], "1"]

    # The numbers the page shows after its script ran are the summary's, each once.
    dom = Page(out["dom"])
    assert sorted(dom.keyed) == sorted(summary_leaves(report["summary"]).items())
    assert ("by_detector." + HOSTILE, "21") in dom.keyed

    # The budgets and shadow section: laid out, every number of the summary's budgets and
    # shadow parts shown in it and legible (a box with a size), drawn (its picture is not blank).
    policy = out["policy"]
    assert policy["headings"] == [
        "Budgets and runs not enforced",
        "Budgets",
        "Shadow and held-out runs",
        "After the first call that would have been blocked or aborted",
    ]
    leaves = summary_leaves(report["summary"])
    assert policy["shown"] == {k: v for k, v in leaves.items() if k.split(".")[0] in ("budgets", "shadow")}
    assert policy["shown"]["shadow.would_stop.tokens_after.p90"] == "98765"
    width, height, rows = png_pixels(out["policy_png"])
    assert width > 600 and height > 200 and abs(height - policy["box"][3]) <= 2
    assert len({row[i : i + 3] for row in rows[::3] for i in range(0, len(row), 9)}) > 20

    # A real screenshot: the viewport's size, many colours, mostly but not only background.
    png = out["png"]
    (tmp_path / "report.png").write_bytes(png)
    assert len(png) > 20_000
    width, height, rows = png_pixels(png)
    assert (width, height) == (WIDTH, HEIGHT)
    pixels = [row[i : i + 3] for row in rows[::4] for i in range(0, len(row), 12)]  # a 320 x 225 sample
    colours = set(pixels)
    background = max(colours, key=pixels.count)
    assert len(colours) > 50
    assert 0.02 < 1 - pixels.count(background) / len(pixels) < 0.9
    assert elapsed < 150, f"the browser test took {elapsed:.1f}s"  # a hang, not a speed goal
