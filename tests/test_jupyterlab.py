"""The README's interactive path: ``jupyter lab`` serves the repository, opens the example scorecard
notebook (``examples/scorecard.ipynb``, paired with ``examples/scorecard.py`` through jupytext), and
running all of its cells in a real browser ends with the scorecard and no error.

JupyterLab itself runs (``python -m jupyterlab`` on 127.0.0.1, a port the OS picks, a token), and
headless Chromium is driven through the Chrome DevTools Protocol over its websocket (aiohttp): open
``/lab/tree/examples/scorecard.ipynb``, run the command ``notebook:run-all-cells``, poll the DOM
until the kernel is idle and every code cell has an execution count, then read the outputs.

Slow (the notebook runs its scorecard: up to ~3 minutes at its defaults): it runs in .ci/run's
browser tier (``python3 -m pytest -m browser ...``) and skips in a run that did not select browser
tests with ``-m``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser import HEADLESS, chromium

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "examples/scorecard.ipynb"
MARKER = "Scorecard of"
DEADLINE_S = 600.0
"""The whole test: start JupyterLab and Chromium, load the lab, run every cell, check."""

pytestmark = pytest.mark.browser

# One evaluation in the page: what the notebook shows now (DOM), plus the kernel's status and the
# error outputs' names from the app (window.jupyterapp: --LabApp.expose_app_in_browser).
STATE_JS = r"""
(() => {
  const app = window.jupyterapp;
  const widget = app && [...app.shell.widgets('main')].find(w => w.context && w.context.path === NOTEBOOK_PATH);
  const panel = widget ? widget.node : null;
  const state = {app: !!app, panel: !!panel, kernel: null, indicator: null, cells: [], enames: [],
                 dialogs: [...document.querySelectorAll('.jp-Dialog')].map(d => d.innerText.slice(0, 500))};
  if (!panel) return state;
  if (widget.sessionContext) {
    state.kernel = widget.sessionContext.kernelDisplayStatus;
    for (const cell of widget.content.widgets) {
      for (const out of (cell.model.outputs ? cell.model.outputs.toJSON() : [])) {
        if (out.output_type === 'error') state.enames.push(out.ename + ': ' + out.evalue);
      }
    }
  }
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  state.indicator = indicator && indicator.getAttribute('data-status');
  for (const cell of panel.querySelectorAll('.jp-Notebook .jp-Cell')) {
    const prompt = cell.querySelector('.jp-InputArea-prompt');
    const editor = cell.querySelector('.jp-InputArea-editor .cm-content');
    state.cells.push({
      code: cell.classList.contains('jp-CodeCell'),
      prompt: prompt ? prompt.textContent.trim() : '',
      source: editor ? editor.innerText : '',
      outputs: [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => ({
        mime: o.getAttribute('data-mime-type'), text: o.innerText.slice(0, 4000)})),
    });
  }
  return state;
})()
""".replace("NOTEBOOK_PATH", json.dumps(NOTEBOOK))

# The notebook is open (made the current widget), its file loaded and its kernel started: resolves when
# they are, with the widget's path (or why not).
READY_JS = r"""
(async () => {
  const app = window.jupyterapp;
  await app.restored;
  const widget = [...app.shell.widgets('main')].find(w => w.context && w.context.path === NOTEBOOK_PATH);
  if (!widget) return 'not open: ' + [...app.shell.widgets('main')].map(w => w.title.label).join(', ');
  app.shell.activateById(widget.id);
  await widget.context.ready;
  await widget.sessionContext.ready;
  return widget.context.path;
})()
""".replace("NOTEBOOK_PATH", json.dumps(NOTEBOOK))

LAB_SETTINGS = {
    # every cell in the DOM, scrolled into view or not (JupyterLab's default renders only what is seen)
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    # never write the notebook back (its outputs stay out of the repository)
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    # no "fetch Jupyter news?" prompt
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}


class CdpError(RuntimeError):
    """A DevTools Protocol call or a page evaluation failed."""


class Page:
    """One page target of Chromium, over its DevTools websocket: ``call`` a method, ``evaluate``
    JavaScript; the page's console errors and uncaught exceptions are kept in ``console``."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.last_id = 0
        self.console: list[str] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.last_id += 1
        call_id = self.last_id
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        while True:
            msg = await self.ws.receive_json()
            if msg.get("id") == call_id:
                if "error" in msg:
                    raise CdpError(f"{method}: {msg['error']}")
                return msg["result"]
            self._event(msg)

    def _event(self, msg: dict[str, Any]) -> None:
        params = msg.get("params", {})
        if msg.get("method") == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console.append("exception: " + str(details.get("exception", {}).get("description") or details))
        elif msg.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.console.append("console.error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                            for a in params.get("args", [])))

    async def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                                 awaitPromise=await_promise)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise CdpError(str(details.get("exception", {}).get("description") or details.get("text")))
        return result["result"].get("value")


def _write_lab_settings(settings_dir: Path) -> None:
    for name, values in LAB_SETTINGS.items():
        path = settings_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _wait_for_file(path: Path, proc: subprocess.Popen, what: str, log: Path, timeout_s: float) -> str:
    """The text of ``path`` once ``proc`` has written it (fails if ``proc`` exits or time runs out)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with code {proc.returncode} before writing {path.name}:\n{_tail(log)}")
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.2)
    pytest.fail(f"{what} wrote no {path.name} within {timeout_s:.0f} s:\n{_tail(log)}")


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def _stop(proc: subprocess.Popen | None, group: bool = False) -> None:
    """Stop a process this test started, by its PID (``group``: its process group, which it leads)."""
    if proc is None or proc.poll() is not None:
        return
    kill = (lambda sig: os.killpg(proc.pid, sig)) if group else proc.send_signal
    kill(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        kill(signal.SIGKILL)
        proc.wait(timeout=10)


def _describe(state: dict[str, Any] | None) -> str:
    """What the page showed: kernel, dialogs, and per cell its prompt, source and outputs (shortened)."""
    if not state:
        return "(no state read from the page)"
    lines = [f"app={state['app']} notebook panel={state['panel']} kernel={state['kernel']} "
             f"indicator={state['indicator']} error outputs={state['enames']} dialogs={state['dialogs']}"]
    for i, cell in enumerate(state["cells"]):
        source = cell["source"].replace("\n", " ")[:80]
        lines.append(f"  cell {i} {'code' if cell['code'] else 'text'} {cell['prompt'] or '-'} {source!r}")
        for out in cell["outputs"]:
            lines.append(f"      [{out['mime']}] {out['text'][-600:]!r}")
    return "\n".join(lines)


def _errors(state: dict[str, Any]) -> list[str]:
    """Error outputs: tracebacks on stderr, and outputs of type ``error`` (their ``ename``)."""
    shown = [out["text"][-1500:] for cell in state["cells"] for out in cell["outputs"]
             if out["mime"] == "application/vnd.jupyter.stderr" and "Traceback" in out["text"]]
    return shown + state["enames"]


def _pending(state: dict[str, Any]) -> list[int]:
    """The code cells with source that show no execution count yet (``[ ]:`` or ``[*]:``)."""
    return [i for i, cell in enumerate(state["cells"]) if cell["code"] and cell["source"].strip()
            and not re.fullmatch(r"\[\d+\]:", cell["prompt"])]


async def _drive(devtools_port: int, lab_url: str, deadline: float) -> tuple[dict[str, Any], Page]:
    """Open the notebook in the lab, run all cells, and return the page's state once every code cell
    has run and the kernel is idle (fails with what the page shows on an error or at the deadline)."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{devtools_port}/json/list") as resp:
            targets = await resp.json()
        target = next(t for t in targets if t["type"] == "page")
        async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            page = Page(ws)
            await page.call("Runtime.enable")
            await page.call("Page.enable")
            # a headless page has no focus, and JupyterLab's commands act on the focused notebook
            await page.call("Emulation.setFocusEmulationEnabled", enabled=True)
            await page.call("Page.navigate", url=lab_url)
            state: dict[str, Any] | None = None
            # 1. the lab has loaded the notebook and started its kernel
            opened = None
            while opened is None:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not open {NOTEBOOK} before the deadline; the page showed:\n"
                                f"{_describe(state)}\nconsole: {page.console[-10:]}")
                if await page.evaluate("!!(window.jupyterapp && document.querySelector('.jp-NotebookPanel'))"):
                    opened = await page.evaluate(READY_JS, await_promise=True)
                else:
                    state = await page.evaluate(STATE_JS)
                    await asyncio.sleep(0.5)
            assert opened == NOTEBOOK, f"the lab did not open {NOTEBOOK}: {opened}"
            while (state := await page.evaluate(STATE_JS))["kernel"] != "idle":
                if time.monotonic() > deadline or state["kernel"] == "dead" or state["dialogs"]:
                    pytest.fail(f"the kernel did not become idle: {_describe(state)}\nconsole: {page.console[-10:]}")
                await asyncio.sleep(0.5)
            # 2. from no outputs and no execution counts, run every cell top to bottom (not awaited: the
            #    command resolves only when they are all done)
            await page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')", True)
            state = await page.evaluate(STATE_JS)
            assert _pending(state), f"no code cell to run in {NOTEBOOK}, or counts left: {_describe(state)}"
            await page.evaluate("void window.jupyterapp.commands.execute('notebook:run-all-cells')")
            # 3. until the kernel is idle and every code cell shows its execution count
            while True:
                await asyncio.sleep(2.0)
                state = await page.evaluate(STATE_JS)
                if errors := _errors(state):
                    pytest.fail(f"a cell of {NOTEBOOK} failed:\n{errors[0]}\n\nthe page showed:\n{_describe(state)}")
                if state["kernel"] == "dead" or state["dialogs"]:
                    pytest.fail(f"the kernel died or the lab asked something:\n{_describe(state)}")
                if state["kernel"] == "idle" and not _pending(state):
                    break
                if time.monotonic() > deadline:
                    pytest.fail(f"{NOTEBOOK} did not finish within {DEADLINE_S:.0f} s (cells {_pending(state)} had "
                                f"not run):\n{_describe(state)}")
            # 4. the last output is rendered (Markdown renders after the cell's reply)
            for _ in range(20):
                if _last_output(state) and MARKER in _last_output(state):
                    break
                await asyncio.sleep(0.5)
                state = await page.evaluate(STATE_JS)
            await page.call("Browser.close")
            return state, page


def _last_output(state: dict[str, Any]) -> str:
    """The text of the last code cell that has outputs."""
    with_outputs = [cell for cell in state["cells"] if cell["code"] and cell["outputs"]]
    return "\n".join(out["text"] for out in with_outputs[-1]["outputs"]) if with_outputs else ""


def test_jupyterlab_runs_the_example_scorecard_notebook(request, tmp_path):
    if "browser" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow (JupyterLab runs a notebook): selected with -m browser (.ci/run's browser tier)")
    pytest.importorskip("jupyterlab", reason="no JupyterLab: python3 -m pip install -e '.[notebooks]'")
    browser = chromium()
    assert (ROOT / NOTEBOOK).exists(), f"{NOTEBOOK} is missing"
    started = time.monotonic()
    deadline = started + DEADLINE_S
    token = secrets.token_hex(16)
    # JupyterLab's and Chromium's state (settings, workspaces, checkpoints, profile) under tmp_path, not the repo
    runtime, settings, workspaces, checkpoints, profile = (
        tmp_path / d for d in ("runtime", "settings", "workspaces", "checkpoints", "chromium"))
    twins = [ROOT / NOTEBOOK, ROOT / NOTEBOOK.replace(".ipynb", ".py")]
    before = [p.read_bytes() for p in twins]
    _write_lab_settings(settings)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime))
    # the kernel imports this checkout's repro (whatever is installed); the notebook's sweeps use every core
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    env.pop("REPRO_JOBS", None)
    lab_log, browser_log = tmp_path / "jupyterlab.log", tmp_path / "chromium.log"
    lab = chrome = None
    try:
        with lab_log.open("wb") as out:
            lab = subprocess.Popen(
                [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", "--port=0",
                 "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}",
                 "--LabApp.expose_app_in_browser=True", f"--LabApp.user_settings_dir={settings}",
                 f"--LabApp.workspaces_dir={workspaces}", f"--FileCheckpoints.checkpoint_dir={checkpoints}"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        info = json.loads(_wait_for_file(runtime / f"jpserver-{lab.pid}.json", lab, "jupyter lab", lab_log, 120))
        base = f"http://127.0.0.1:{info['port']}{info['base_url']}"
        _check_jupytext_pairing(base, token, lab_log)
        with browser_log.open("wb") as out:
            chrome = subprocess.Popen(
                [browser, *HEADLESS, "--remote-debugging-port=0", f"--user-data-dir={profile}",
                 "--window-size=1400,1000", "--no-first-run", "about:blank"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        devtools_port = int(_wait_for_file(profile / "DevToolsActivePort", chrome, "chromium", browser_log,
                                           60).split()[0])
        lab_url = f"{base}lab/tree/{NOTEBOOK}?token={token}"
        state, page = asyncio.run(asyncio.wait_for(_drive(devtools_port, lab_url, deadline),
                                                   timeout=max(1.0, deadline - time.monotonic() + 30)))
    except TimeoutError:
        pytest.fail(f"over the {DEADLINE_S:.0f} s deadline; jupyter lab's log:\n{_tail(lab_log)}")
    finally:
        _stop(chrome, group=True)
        _stop(lab)
    assert [p.read_bytes() for p in twins] == before, "JupyterLab wrote the notebook back (autosave is on?)"
    assert not _errors(state), _describe(state)
    last = _last_output(state)
    assert MARKER in last, (f"the notebook's last output does not contain {MARKER!r}: {last[-1000:]!r}\n"
                            f"the page showed:\n{_describe(state)}\nconsole: {page.console[-10:]}")
    print(f"{NOTEBOOK}: {len(state['cells'])} cells run in JupyterLab in {time.monotonic() - started:.0f} s")


def _check_jupytext_pairing(base: str, token: str, log: Path) -> None:
    """jupytext's contents manager is on: the notebook's text twin opens as a notebook, paired with it."""
    import urllib.error
    import urllib.request

    twin = NOTEBOOK.removesuffix(".ipynb") + ".py"
    url = f"{base}api/contents/{twin}?type=notebook&content=1&token={token}"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            model = json.load(resp)
    except urllib.error.HTTPError as exc:
        pytest.fail(f"{twin} does not open as a notebook (is jupytext's server extension enabled? "
                    f"`jupyter server extension list`): {exc}\n{_tail(log)}")
    formats = model["content"]["metadata"].get("jupytext", {}).get("formats", "")
    assert "ipynb" in formats and "py:percent" in formats, f"{twin} is not paired with {NOTEBOOK}: {formats!r}"
