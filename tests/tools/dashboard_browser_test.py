#!/usr/bin/env python3
"""The live page of paddlerun --dashboard in a real browser: Debian's chromium, headless, driven
by chromium-driver through python3-selenium (tools/install-deps).

An elastic job of 4 workers (`--nproc=4 --min-nproc=2 //examples:fashion_mnist --elastic`) runs
with --dashboard=0. The test opens the page and checks that it shows 4 ranks and that their step
counts move; then it SIGKILLs the worker of rank 1 and checks that the page shows the failure
naming it within 5 s, and the survivors' membership change (the new generation and its cause)
after that. It saves a screenshot before and after the kill into the test's outputs
($TEST_UNDECLARED_OUTPUTS_DIR, else a temporary folder) and prints the times. SKIP (exit 0)
where chromium, chromedriver or selenium are not installed.

usage: dashboard_browser_test.py LAUNCH
"""
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from tests.testing.launched_job import LaunchedJob

LAUNCH = [sys.argv[1]] if not sys.argv[1].endswith(".py") else ["/usr/bin/python3", sys.argv[1]]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
OUT = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or tempfile.mkdtemp(prefix="dashboard.")
failures = []


def fail(message):
    print(f"FAIL: {message}", flush=True)
    failures.append(message)


def browser():
    """A headless chromium under selenium, or None (with the reason printed) where missing."""
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        print("SKIP: python3-selenium is not installed (tools/install-deps)")
        return None
    if chromium is None or driver is None:
        print("SKIP: chromium or chromedriver is not installed (tools/install-deps: chromium, "
              "chromium-driver)")
        return None
    options = Options()
    for flag in ("--headless", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1100,1500"):
        options.add_argument(flag)
    options.binary_location = chromium
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_for(what, predicate, timeout):
    """(seconds it took, value) once predicate() is truthy; fails after `timeout`."""
    start = time.monotonic()
    while True:
        value = predicate()
        if value:
            return time.monotonic() - start, value
        if time.monotonic() - start > timeout:
            fail(f"{what} within {timeout} s")
            return None, None
        time.sleep(0.1)


def rows(page):
    """The workers table as (class, [cell texts]) per row, read in one go: the page rebuilds the
    table every second, so element references would go stale."""
    return page.execute_script(
        "return [...document.querySelectorAll('#workers tbody tr')]"
        ".map(r => [r.className, [...r.cells].map(c => c.textContent)])")


def table_ranks(page):
    """{rank: steps} of the workers the page shows as reporting."""
    return {int(cells[0]): int(cells[4] or 0) for kind, cells in rows(page) if kind != "down"}


def text_of(page, element_id):
    return page.execute_script(f"return document.getElementById('{element_id}').innerText")


def events_text(page):
    return text_of(page, "events")


def main():
    page = browser()
    if page is None:
        return 0
    job = LaunchedJob(LAUNCH + ["--nproc=4", "--min-nproc=2", "--dashboard=0",
                                "//examples:fashion_mnist", "--elastic", "--model=mlp",
                                "--epochs=200", "--train-samples=4000", "--test-samples=200",
                                "--batch=64"], env=ENV)
    try:
        _, m = job.wait_line(r"dashboard at (http://\S+/) ", timeout=60)
        if not m:
            fail("paddlerun did not print the dashboard's address")
            return 1
        page.get(m.group(1))
        took, ranks = wait_for("the page shows 4 ranks", lambda: (
            lambda r: r if len(r) == 4 else None)(table_ranks(page)), 60)
        if ranks:
            print(f"the page showed 4 ranks {took:.1f} s after it loaded: {sorted(ranks)}")
            wait_for("the step counts grow on the page", lambda: all(
                table_ranks(page).get(r, 0) > steps for r, steps in ranks.items()), 15)
            if not re.search(r"\d+ of 4 workers reporting", text_of(page, "summary")):
                fail(f"summary: {text_of(page, 'summary')!r}")
            page.save_screenshot(os.path.join(OUT, "dashboard_running.png"))
        # SIGKILL the worker the page shows as rank 1.
        victim = _worker_pid(job, page)
        if victim is None:
            fail("no pid for rank 1 on the page")
            return 1
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        took, _ = wait_for("the page names the killed worker", lambda: re.search(
            rf"\[failure\] rank 1: worker \d \(pid {victim}\) killed by signal 9",
            events_text(page)), 5)
        if took is not None:
            print(f"the page named the killed worker (pid {victim}) {took:.1f} s after SIGKILL")
        took2, _ = wait_for("the page shows the survivors' membership change", lambda: re.search(
            r"\[membership\].*world size 3", events_text(page)), 60)
        if took2 is not None:
            print(f"the page showed the membership change {time.monotonic() - killed_at:.1f} s "
                  "after SIGKILL: " +
                  next(line for line in events_text(page).splitlines() if "[membership]" in line))
        time.sleep(6)  # the killed worker shown as down, the new generation's curves
        page.save_screenshot(os.path.join(OUT, "dashboard_after_kill.png"))
        print(f"screenshots: {OUT}/dashboard_running.png, {OUT}/dashboard_after_kill.png")
    finally:
        page.quit()
        if job.p.poll() is None:
            job.p.send_signal(signal.SIGTERM)
        job.finish(30)
        if failures:
            print(job.text()[-4000:])
    print("PASS" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


def _worker_pid(job, page):
    """Rank 1's pid as the page's table shows it."""
    for kind, cells in rows(page):
        if cells and cells[0] == "1" and kind != "down":
            return int(cells[2])
    return None


if __name__ == "__main__":
    sys.exit(main())
